-- Keep the latest and the `keep` - 1 other top-level records of workflow committed last;
-- tombstone and drop the rest with what is nested in them. Returns {top-level count dropped, {workflow, id, ...} removed}.
local H = tag(workflow)
for _, id in ipairs(redis.call('ZRANGE', top, 0, -1)) do
  if redis.call('EXISTS', rkey(H, id)) == 0 then redis.call('ZREM', top, id) end
end
local count = redis.call('ZCARD', top)
if count <= keep then return {0, {}} end
local doomed = redis.call('ZRANGE', top, 0, count - keep - 1)
if keep > 0 then
  -- The latest stays wherever it is in the order; the oldest of the others kept goes instead.
  local latest = head(workflow)
  for i, id in ipairs(doomed) do
    if id == latest then
      doomed[i] = redis.call('ZRANGE', top, count - keep, count - keep)[1]
      break
    end
  end
end
local removed = {}
for _, id in ipairs(doomed) do
  local dropped = drop_family(H, workflow, id)
  for i = 2, #dropped, 2 do
    redis.call('SADD', H .. ':tombs', dropped[i])
    if INLINE then
      redis.call('SET', prunedkey(dropped[i]), workflow)
      touch(prunedkey(dropped[i]))
    end
    removed[#removed + 1] = dropped[i - 1]
    removed[#removed + 1] = dropped[i]
  end
end
touch(H .. ':tombs')
if INLINE then
  listed(workflow) -- its tombstones now live as long as its index entry
  unlist_emptied(workflow, removed)
end
return {#doomed, removed}
