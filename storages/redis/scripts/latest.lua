-- The latest of an index of home (top or signature set: its newest entry, then through the
-- lineage, lineage.lua), read only: false for an empty index; {id, body, then id, body, ... of
-- every record nested in it}; {id} alone when that entry's record is gone and expiry does not
-- explain it, {id, false} when it is stored without its body (a damaged store): never an older
-- entry.
-- The home's key tag comes built by the client (it built the index's name from it): escaping
-- a name in Lua (a LangGraph namespace holds ':' and '%') cost more than the empty lookup.
local H = home_tag
local newest = redis.call('ZREVRANGE', index, 0, 0)
if #newest == 0 then return false end
local id = newest[1]
local fields = redis.call('HMGET', rkey(H, id), 'b', 's')
local body = fields[1]
if body and fields[2] then
  local lost
  id, lost = tip(H, id, fields[2])
  if lost then return {id} end
  if id ~= newest[1] then body = redis.call('HGET', rkey(H, id), 'b') end
end
if body then
  local out = {id, body}
  descendants(H, id, out)
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
