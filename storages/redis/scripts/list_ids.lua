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
-- Existence is checked a chunk at a time with one multi-key EXISTS (every key is in this slot).
-- Most ids need no escaping, which four plain searches over a block of them joined show
-- (scores never need it): their keys are then built by concatenation alone. A pattern search,
-- or esc() per id, was half the server's work per entry; a block of about 200 ids joins into
-- one string (one joined string of every id was built through many intermediate ones).
local CHUNK, BLOCK = 1000, 200
local base = rprefix(H)
local function plain(first, last)
  local joined = table.concat(rows, ' ', step * first - step + 1, step * last)
  return unescaped(joined)
end
local keys = {}
local complete = true
for first = 1, n, CHUNK do
  local last = math.min(first + CHUNK - 1, n)
  local count = 0
  for block = first, last, BLOCK do
    local block_last = math.min(block + BLOCK - 1, last)
    local escape = not plain(block, block_last)
    for i = block, block_last do
      count = count + 1
      local id = rows[step * i - step + 1]
      if escape then keys[count] = rkey(H, id) else keys[count] = base .. id end
    end
  end
  if redis.call('EXISTS', unpack(keys, 1, count)) ~= count then
    complete = false
    break
  end
end
if complete then return {rows, 0, false} end
-- Some record is gone: look at every entry, key by key.
local present = {}
for i = 1, n do present[i] = redis.call('EXISTS', rkey(H, rows[step * i - step + 1])) == 1 end
local out = {}
-- With a TTL, records expire oldest first: entries older than every stored record expired.
local oldest = false
for i = 1, n do
  if present[i] then oldest = i; break end
end
local lost, first_lost = 0, false
for i = 1, n do
  local id = rows[step * i - step + 1]
  if not present[i] then
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
