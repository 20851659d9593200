-- One page of an index of home with bodies, read only: the first `limit` entries with a score
-- above `after`. Returns {{id, score, body, ...} of entries with a record, the last score read
-- or false at the end, {id, score, ...} of entries whose record is gone, the first id whose
-- record is stored without its body (a damaged store) or false}.
local H = tag(home)
local rows = redis.call('ZRANGEBYSCORE', index, '(' .. after, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
local out, gone, bodiless = {}, {}, false
for i = 1, #rows, 2 do
  local key = rkey(H, rows[i])
  local body = redis.call('HGET', key, 'b')
  if body then
    out[#out + 1] = rows[i]; out[#out + 1] = rows[i + 1]; out[#out + 1] = body
  elseif not bodiless and redis.call('EXISTS', key) == 1 then
    bodiless = rows[i]
  else
    gone[#gone + 1] = rows[i]; gone[#gone + 1] = rows[i + 1]
  end
end
local last = false
if #rows == 2 * limit then last = rows[#rows] end
return {out, last, gone, bodiless}
