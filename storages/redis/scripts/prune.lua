-- Keep the newest `keep` top-level records of workflow; tombstone and drop the rest with what
-- is nested in them. Returns {top-level count dropped, {workflow, id, ...} removed}.
local H = tag(workflow)
for _, id in ipairs(redis.call('ZRANGE', top, 0, -1)) do
  if redis.call('EXISTS', rkey(H, id)) == 0 then redis.call('ZREM', top, id) end
end
local count = redis.call('ZCARD', top)
if count <= keep then return {0, {}} end
local doomed = redis.call('ZRANGE', top, 0, count - keep - 1)
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
