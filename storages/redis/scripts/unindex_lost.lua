-- Repair of a lost record (storages/redis/leftovers.py): while its record is still absent (a save
-- of the id in between restores it, and is left alone), the id leaves the workflow's top index,
-- the signature indexes given, its successor index (a range's marker, which names no id, stays)
-- and, on plain Redis, its location pointer if that names this workflow. Returns 1 if removed.
if redis.call('EXISTS', record) == 1 then return 0 end
local top = topkey(home_tag)
if not redis.call('ZSCORE', top, id) then return 0 end
for _, index in ipairs(signature_indexes) do redis.call('ZREM', index, id) end
redis.call('ZREM', top, id)
local successors = nextkey(home_tag)
for _, member in ipairs(redis.call('ZRANGE', successors, 0, -1)) do
  if indexed_successor(member) == id then redis.call('ZREM', successors, member) end
end
if INLINE and redis.call('GET', lockey(id)) == workflow then redis.call('DEL', lockey(id)) end
return 1
