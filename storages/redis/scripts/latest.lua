-- The head of an index of home (top or signature set) and its rivals, as lineage.lua's latest_of
-- chooses them, read only: false for an empty index; {id, body, then id, body, ... of every
-- record nested in it}, with one more element when the head has rivals: {rival id, body, {id,
-- body, ... nested in it}, ...} in ascending sequence; {id} alone when the head's (or a rival's)
-- record is gone and expiry does not explain it, {id, false} when the head is stored without its
-- body (a damaged store; a rival's body is false then): never an older entry.
-- The home's key tag comes built by the client (it built the index's name from it): escaping
-- a name in Lua (a LangGraph namespace holds ':' and '%') cost more than the empty lookup.
local H = home_tag
local id, body, lost, others = latest_of(H, index, true, true)
if not id then return false end
if lost == id then return {id} end
if not body then return {id, false} end
if lost then return {lost} end
local out = {id, body}
descendants(H, id, out)
if not others then return out end
local found = {}
for _, other in ipairs(others) do
  local nested = {}
  local other_body = redis.call('HGET', rkey(H, other), 'b')
  if other_body then descendants(H, other, nested) end
  found[#found + 1] = other
  found[#found + 1] = other_body or false
  found[#found + 1] = nested
end
out[#out + 1] = found
return out
