-- The head of an index of home (top or signature set: its newest entry, then through the
-- lineage, lineage.lua) and its rivals, read only: false for an empty index; {id, body, then
-- id, body, ... of every record nested in it}, with one more element when the head has rivals:
-- {rival id, body, {id, body, ... nested in it}, ...} in ascending sequence; {id} alone when
-- the head's (or a rival's) record is gone and expiry does not explain it, {id, false} when the
-- head is stored without its body (a damaged store; a rival's body is false then): never an
-- older entry.
-- The home's key tag comes built by the client (it built the index's name from it): escaping
-- a name in Lua (a LangGraph namespace holds ':' and '%') cost more than the empty lookup.
local H = home_tag
local newest = redis.call('ZREVRANGE', index, 0, 0)
if #newest == 0 then return false end
local id = newest[1]
local fields = redis.call('HMGET', rkey(H, id), 'b', 's', 'r')
local body, signature, marked = fields[1], fields[2], fields[3]
local from = false
if body and signature then
  local lost
  id, lost, from = tip(H, id, signature)
  if lost then return {id} end
  if id ~= newest[1] then
    local moved = redis.call('HMGET', rkey(H, id), 'b', 'r')
    body, marked = moved[1], moved[2]
  end
end
if body then
  local out = {id, body}
  descendants(H, id, out)
  -- Only a head its save marked (field 'r', lineage.lua: rivals) can have rivals: a root ('0')
  -- when the record committed right before it is a leaf root of its signature, a head saved
  -- after a sibling ('1') when its range has other leaves.
  if not (marked and signature) then return out end
  local previous = false
  if marked ~= '0' then
    -- The walk's last step came from the head's previous id; a head it did not move to says it.
    previous = from or redis.call('HGET', rkey(H, id), 'p')
    if not previous then return out end  -- a damaged record: marked '1', yet no previous id
  end
  local others, lost = rivals(H, id, previous, signature, index == topkey(H))
  if lost then return {lost} end
  if #others == 0 then return out end
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
end
if redis.call('EXISTS', rkey(H, id)) == 1 then return {id, false} end
if TTL == 0 then return {id} end
-- With a TTL, records expire oldest first: the newest one gone is expiry only if all are gone.
local start = 1
while true do
  local older = redis.call('ZREVRANGE', index, start, start + 499)
  if #older == 0 then return false end
  for _, other in ipairs(older) do
    if redis.call('EXISTS', rkey(H, other)) == 1 then return {id} end
  end
  start = start + 500
end
