-- Cluster only: delete a location (or pruned) pointer if it still names home.
if redis.call('GET', pointer) == home then redis.call('DEL', pointer) end
return 1
