-- Drop every record of workflow and its tombstones. Returns {top-level count, {workflow, id,
-- ...} removed, {tombstoned ids}}.
local H = tag(workflow)
local count, removed = 0, {}
for _, id in ipairs(redis.call('ZRANGE', top, 0, -1)) do
  local dropped = drop_family(H, workflow, id)
  if #dropped > 0 then count = count + 1 end
  for _, item in ipairs(dropped) do removed[#removed + 1] = item end
end
redis.call('DEL', top, nextkey(H))
local tombs = redis.call('SMEMBERS', tombskey(H))
if INLINE then
  for _, id in ipairs(tombs) do
    if redis.call('GET', prunedkey(id)) == workflow then redis.call('DEL', prunedkey(id)) end
  end
end
redis.call('DEL', tombskey(H))
unlist_emptied(workflow, removed)
return {count, removed, tombs}
