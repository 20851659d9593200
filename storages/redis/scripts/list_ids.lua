-- Every entry of an index of home (top or signature set) in sequence order, in one call, read
-- only: {entries, lost, first lost id or false}. entries are the ids whose record is stored
-- (with scores, id, score, ..., when with_scores); lost counts the entries whose record is gone
-- and which expiry does not explain (no TTL, or newer than the oldest record still stored).
-- Scores are asked of ZRANGE only when they are returned: a reply of twice the size costs Lua
-- more to convert than the existence check below.
local H = tag(home)
local rows, step
if with_scores then
  rows, step = redis.call('ZRANGE', index, 0, -1, 'WITHSCORES'), 2
else
  rows, step = redis.call('ZRANGE', index, 0, -1), 1
end
local n = #rows / step
-- Existence is checked a chunk at a time with one multi-key EXISTS (every key is in this slot);
-- only a chunk that comes back short is looked at key by key.
local CHUNK = 1000
local present = {}
local missing = false
for first = 1, n, CHUNK do
  local last = math.min(first + CHUNK - 1, n)
  local keys = {}
  for i = first, last do keys[#keys + 1] = rkey(H, rows[step * (i - 1) + 1]) end
  if redis.call('EXISTS', unpack(keys)) ~= #keys then
    missing = true
    for i = first, last do
      if redis.call('EXISTS', keys[i - first + 1]) == 0 then present[i] = false end
    end
  end
end
if not missing then return {rows, 0, false} end
local out = {}
-- With a TTL, records expire oldest first: entries older than every stored record expired.
local oldest = false
for i = 1, n do
  if present[i] ~= false then oldest = i; break end
end
local lost, first_lost = 0, false
for i = 1, n do
  local id = rows[step * (i - 1) + 1]
  if present[i] == false then
    if TTL == 0 or (oldest and i > oldest) then
      lost = lost + 1
      if not first_lost then first_lost = id end
    end
  else
    out[#out + 1] = id
    if with_scores then out[#out + 1] = rows[step * i] end
  end
end
return {out, lost, first_lost}
