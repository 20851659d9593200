-- Keep the head, its rivals and the `keep` - 1 other top-level records of workflow committed
-- last (storages.backend.pruned_records; nothing with `keep` 0); tombstone and drop the rest with
-- what is nested in them. Returns {top-level count dropped, {workflow, id, ...} removed}.
local H = tag(workflow)
for _, id in ipairs(redis.call('ZRANGE', top, 0, -1)) do
  if redis.call('EXISTS', rkey(H, id)) == 0 then redis.call('ZREM', top, id) end
end
local count = redis.call('ZCARD', top)
if count <= keep then return {0, {}} end
local doomed
if keep == 0 then
  doomed = redis.call('ZRANGE', top, 0, -1)
else
  -- The head and its rivals (lineage.lua: latest_of) stay wherever they are in the order; of
  -- the others, the oldest go. A rival whose record is gone needs no keeping (its entry left the
  -- top index above).
  local latest, _, _, rivals_of_latest = latest_of(H, top, false, true)
  local kept = {[latest] = true}
  for _, id in ipairs(rivals_of_latest or {}) do kept[id] = true end
  local others = {}
  for _, id in ipairs(redis.call('ZRANGE', top, 0, -1)) do
    if not kept[id] then others[#others + 1] = id end
  end
  doomed = {}
  for i = 1, #others - (keep - 1) do doomed[i] = others[i] end
end
local removed = {}
for _, id in ipairs(doomed) do
  local dropped = drop_family(H, workflow, id)
  for i = 2, #dropped, 2 do
    redis.call('SADD', tombskey(H), dropped[i])
    if INLINE then
      redis.call('SET', prunedkey(dropped[i]), workflow)
      touch(prunedkey(dropped[i]))
    end
    removed[#removed + 1] = dropped[i - 1]
    removed[#removed + 1] = dropped[i]
  end
end
touch(tombskey(H))
if INLINE then
  listed(workflow) -- its tombstones now live as long as its index entry
  unlist_emptied(workflow, removed)
end
return {#doomed, removed}
