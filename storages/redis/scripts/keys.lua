-- Helpers of every write script. The key-building functions (esc, tag, rkey, topkey, ...) come
-- before this file, generated from the layout's one definition (storages/redis/keys.py, lua_layout).
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
  local index = workflowskey()
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
-- A record's fields as HSET takes them after its key: the one list of what a save writes
-- (save.lua and save_one.lua). r is a SavedRecord row; seq its sequence; mark its lineage mark
-- (lineage.lua: index_top_level) or false; top_id the top-level record of the save, which a
-- nested record names. with_body false leaves the body out: a staged body is renamed into place.
-- The table has room for every optional field from the start: growing a Lua table reallocates it.
local function record_fields(r, seq, mark, top_id, with_body)
  local fields = {'b', r.body, 'd', r.digest, 'w', r.workflow, 's', r.signature, 'q', seq, 'n', r.position,
    false, false, false, false, false, false, false, false}
  local n = 12
  if r.previous ~= '' then fields[n + 1] = 'p'; fields[n + 2] = r.previous; n = n + 2 end
  if mark then fields[n + 1] = 'r'; fields[n + 2] = mark; n = n + 2 end
  if r.container ~= '' then
    fields[n + 1] = 'c'; fields[n + 2] = r.container; fields[n + 3] = 'o'; fields[n + 4] = top_id; n = n + 4
  end
  return unpack(fields, with_body and 1 or 3, n)
end
