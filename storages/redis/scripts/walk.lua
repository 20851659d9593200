-- Follow previous ids from start while they resolve, at most `depth` records. Returns
-- {{id, previous, ...}, {id, body, ...} (with bodies), {tombstoned ids}, the id it could not
-- resolve in this slot (cluster) or false}.
local current = start
local found = locate(current, given_home)
local links, bodies, tombs, seen, n = {}, {}, {}, {}, 0
local unresolved = false
-- The sequence, previous id (and body) of id in home h; false if it is not stored there.
local function read(h, record_id)
  if not h then return false end
  local key = rkey(tag(h), record_id)
  local f
  if with_bodies then
    f = redis.call('HMGET', key, 'q', 'p', 'b')
  else
    f = redis.call('HMGET', key, 'q', 'p')
  end
  if not f[1] then return false end
  return f
end
while current and not seen[current] and n < depth do
  local f = read(found, current)
  if not f and INLINE and n > 0 then
    -- Most links stay in their workflow; one that leaves it is found through its pointer.
    found = redis.call('GET', lockey(current))
    f = read(found, current)
  end
  if not f then
    if INLINE then
      if redis.call('EXISTS', prunedkey(current)) == 1 then tombs[#tombs + 1] = current end
    else
      unresolved = current
    end
    break
  end
  seen[current] = true
  n = n + 1
  links[#links + 1] = current
  links[#links + 1] = f[2]
  if with_bodies then
    bodies[#bodies + 1] = current
    bodies[#bodies + 1] = f[3]
    descendants(tag(found), current, bodies)
  end
  current = f[2]
end
return {links, bodies, tombs, unresolved}
