-- Records stored in home, by id. Per id: false if absent, else {body, signature, sequence}
-- ('body'; body false for a record stored without one, a damaged store) or {workflow, previous, signature, container, sequence, size} ('info').
local H = tag(home)
local out = {}
for _, id in ipairs(ids) do
  local key = rkey(H, id)
  if what == 'body' then
    local f = redis.call('HMGET', key, 'b', 's', 'q')
    if f[1] or f[3] then out[#out + 1] = f else out[#out + 1] = false end
  else
    local f = redis.call('HMGET', key, 'w', 'p', 's', 'c', 'q')
    if f[1] then
      out[#out + 1] = {f[1], f[2], f[3], f[4], f[5], redis.call('HSTRLEN', key, 'b')}
    else
      out[#out + 1] = false
    end
  end
end
return out
