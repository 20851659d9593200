-- Add names to the prefix's workflow index (on a cluster, where the write scripts cannot reach
-- it; and when an index is completed); with complete, mark it as listing every workflow.
-- Returns 1 if it is marked complete, else 0.
for _, w in ipairs(names) do listed(w) end
if complete then
  redis.call('ZADD', index, 'inf', '')
  touch(index)
end
if redis.call('ZSCORE', index, '') then return 1 end
return 0
