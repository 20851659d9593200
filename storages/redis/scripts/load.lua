-- What decoding a checkpoint needs, flat: {body, workflow, previous or false, signature, then
-- id, body, ... of every record nested in it}; false if it is not stored.
local found = locate(id, given_home)
if not found then return false end
local H = tag(found)
local out = redis.call('HMGET', rkey(H, id), 'b', 'w', 'p', 's')
if not out[1] then return false end
descendants(H, id, out)
return out
