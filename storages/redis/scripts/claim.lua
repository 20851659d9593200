-- Cluster only: point the location pointer at home unless it names another home, which is
-- returned (the client checks whether that record still exists, then may take it over).
local current = redis.call('GET', pointer)
if current and current ~= home and not take_over then return current end
redis.call('SET', pointer, home)
touch(pointer)
return false
