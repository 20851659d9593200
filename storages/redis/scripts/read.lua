-- What one record says about itself: 'info' -> {workflow, previous, signature, container,
-- sequence, size}; 'children' -> {ids...}; 'nested' -> {id, body, ...} of its descendants.
-- false if it is not stored.
local found = locate(id, given_home)
if not found then return false end
local H = tag(found)
local key = rkey(H, id)
if redis.call('EXISTS', key) == 0 then return false end
if what == 'info' then
  local f = redis.call('HMGET', key, 'w', 'p', 's', 'c', 'q')
  return {f[1], f[2], f[3], f[4], f[5], redis.call('HSTRLEN', key, 'b')}
end
if what == 'children' then return {redis.call('LRANGE', kkey(H, id), 0, -1)} end
local out = {}
descendants(H, id, out)
return out
