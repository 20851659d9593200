-- The general save: a top-level record (records[1]) and the records nested in it, all stored in
-- home's slot. Returns {'ok', unindexed, created}, {'exists', digest} or {'conflict', id};
-- fenced, also {'exists', digest, latest} or {'stale', latest}. unindexed (plain Redis) is 1 when
-- a name new to the workflow index found it not yet complete; created (a cluster) is 1 when home had no index or
-- tombstones before this save: the client, which keeps the index there, lists home again.
local H = tag(home)
-- The key of the record stored under id, if any. On plain Redis every record has a location
-- pointer written by the same script, so no pointer means no record, wherever it would live.
local function stored(id)
  local key
  if INLINE then
    local found = redis.call('GET', lockey(id))
    if not found then return false end
    key = rkey(tag(found), id)
  else
    key = rkey(H, id)
  end
  if redis.call('EXISTS', key) == 1 then return key end
  return false
end
local top = records[1]
local existing = stored(top.id)
if existing then
  if fenced then return {'exists', redis.call('HGET', existing, 'd'), latest_of(H, topkey(H), false, false) or ''} end
  return {'exists', redis.call('HGET', existing, 'd')}
end
if fenced then
  local latest = latest_of(H, topkey(H), false, false) or ''
  -- The latest may be this very checkpoint, indexed with its record lost: saving it restores it.
  if latest ~= expected and latest ~= top.id then return {'stale', latest} end
end
for i = 2, #records do
  if stored(records[i].id) then return {'conflict', records[i].id} end
end
local created, unindexed = 0, 0
if not INLINE and redis.call('EXISTS', topkey(H), nestedkey(H), tombskey(H)) == 0 then created = 1 end
for _, r in ipairs(records) do
  local seq = r.sequence
  if seq == '' then
    local next_counter = seqkey(tag(r.workflow))
    seq = redis.call('INCR', next_counter)
    touch(next_counter)
  end
  local key = rkey(H, r.id)
  -- A top-level record's mark says where its rivals may be, should it be the head (lineage.lua).
  local mark = r.container == '' and index_top_level(nextkey(H), r.previous, r.signature, seq, r.id)
  redis.call('HSET', key, record_fields(r, seq, mark, top.id, true))
  touch(key)
  if r.container == '' then
    local signature = sigkey(H, r.signature)
    redis.call('ZADD', topkey(H), seq, r.id)
    redis.call('ZADD', signature, seq, r.id)
    touch(topkey(H))
    touch(signature)
    if r.previous ~= '' then touch(nextkey(H)) end
  else
    redis.call('RPUSH', kkey(H, r.container), r.id)
    touch(kkey(H, r.container))
    redis.call('RPUSH', fkey(H, top.id), r.id)
    touch(fkey(H, top.id))
    if INLINE then
      local index = nestedkey(tag(r.workflow))
      redis.call('ZADD', index, 'NX', seq, nmember(home, r.id))
      touch(index)
    end
  end
  if INLINE then
    local location = lockey(r.id)
    redis.call('SET', location, home)
    touch(location)
    if listed(r.workflow) then unindexed = 1 end
  end
end
return {'ok', unindexed, created}
