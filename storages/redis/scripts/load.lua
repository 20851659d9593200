-- What decoding a checkpoint needs, flat: {body, workflow, previous or false, signature, home,
-- then id, body, ... of every record nested in it}; false if it is not stored; a record stored
-- without its body (a damaged store) comes with body false, to be reported; {home} alone when
-- the id's pointer is stored and its record is not (lost: evicted, or deleted behind our back);
-- {home, size} for a body over inline_limit with nothing nested (plain Redis). The home lets the
-- client read the record again by a transaction of plain commands (loads.py). On plain Redis the
-- route is the id's location pointer, so its name is not built again here.
local found
if INLINE then found = redis.call('GET', route) else found = locate(id, given_home) end
if not found then return false end
local H = tag(found)
local key, children = rkey(H, id), kkey(H, id)
if INLINE and inline_limit > 0 then
  -- A large body costs the server a copy into Lua and one out (about 2 ms a megabyte) where the
  -- HMGET of a transaction copies it once: {home, size}, and the client reads it that way.
  local size = redis.call('HSTRLEN', key, 'b')
  if size > inline_limit and redis.call('EXISTS', children) == 0 then return {found, size} end
end
local out = redis.call('HMGET', key, 'b', 'w', 'p', 's')
if not out[1] then
  if redis.call('EXISTS', key) == 0 then
    -- The pointer outlived the record. On plain Redis saves and deletes write and remove both
    -- in one script, so without a TTL (where either may expire first) the record was lost:
    -- {home} reports it. (On a cluster the pointer is written in a step of its own.)
    if INLINE and TTL == 0 then return {found} end
    return false
  end
  out[5] = found
  return out
end
out[5] = found
-- Most records have nothing nested: descendants() (which reads the list again) only if it says so.
if redis.call('EXISTS', children) == 1 then descendants(H, id, out) end
return out
