-- Key names, as storages/redis/keys.py builds them: esc() writes '%', '{', '}' and ':' as %XX,
-- so no id or name can end a hash tag early, add a key level, or name another key.
local function escape_char(c) return string.format('%%%02X', string.byte(c)) end
-- Four plain searches (memchr) cost the server less than one search for the character class.
local function esc(s)
  local find = string.find
  if not (find(s, '%', 1, true) or find(s, ':', 1, true) or find(s, '{', 1, true) or find(s, '}', 1, true)) then
    return s
  end
  return (string.gsub(s, '[%%{}:]', escape_char))
end
local function tag(w) return P .. ':{' .. esc(w) .. '}' end
local function rkey(h, id) return h .. ':r:' .. esc(id) end
local function kkey(h, id) return h .. ':k:' .. esc(id) end
local function fkey(h, id) return h .. ':f:' .. esc(id) end
local function sigkey(h, s) return h .. ':sig:' .. esc(s) end
local function lockey(id) return P .. ':{' .. esc(id) .. '}:loc' end
local function prunedkey(id) return P .. ':{' .. esc(id) .. '}:pruned' end
local function nmember(home, id) return esc(home) .. ':' .. esc(id) end
local function touch(key) if TTL > 0 then redis.call('PEXPIRE', key, TTL) end end
-- The home workflow of a record: looked up here on plain Redis, given by the client on a cluster.
local function locate(id, given)
  if INLINE then return redis.call('GET', lockey(id)) end
  if given == '' then return false end
  return given
end
-- The prefix's workflow index, P:workflows: a sorted set of every workflow name with a top-level
-- index, a nested index or tombstones, scored with when its keys expire (+inf without a TTL),
-- and the member '' once it is complete (stores written before it existed are scanned once).
-- The write scripts keep it on plain Redis; on a cluster it is in another slot, and the client
-- keeps it (storages/redis/workflows.py). listed() adds a name; true when the name is new and
-- the index is not complete, which the client then completes. Only a new name costs more than
-- the ZADD: the completeness test, and with a TTL dropping names expired by now.
local function listed(w)
  local index = P .. ':workflows'
  local added
  if TTL > 0 then
    local now = redis.call('TIME')
    local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    added = redis.call('ZADD', index, ms + TTL, w) == 1
    if added then redis.call('ZREMRANGEBYSCORE', index, '-inf', '(' .. ms) end
    redis.call('PEXPIRE', index, TTL)
  else
    added = redis.call('ZADD', index, 'inf', w) == 1
  end
  return added and not redis.call('ZSCORE', index, '')
end
