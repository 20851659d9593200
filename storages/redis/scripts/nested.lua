-- Bodies of every record nested, at any depth, in record id of home H, appended to out as
-- id, body, id, body, ... (body false for a record stored without one: a damaged store)
local function descendants(H, id, out)
  local pending = redis.call('LRANGE', kkey(H, id), 0, -1)
  while #pending > 0 do
    local child = table.remove(pending)
    local body = redis.call('HGET', rkey(H, child), 'b')
    if not body and redis.call('EXISTS', rkey(H, child)) == 1 then
      out[#out + 1] = child
      out[#out + 1] = false
    elseif body then
      out[#out + 1] = child
      out[#out + 1] = body
      for _, grandchild in ipairs(redis.call('LRANGE', kkey(H, child), 0, -1)) do
        pending[#pending + 1] = grandchild
      end
    end
  end
end
