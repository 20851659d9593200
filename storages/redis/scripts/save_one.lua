-- The common save on plain Redis, one top-level record with nothing nested: the writes of
-- save.lua for that case, with the key names given, so the server runs only the commands it
-- needs. Returns false when written (1 if the workflow was new to a workflow index that is not
-- yet complete: the client completes it), else the stored digest; fenced, {'exists', digest, latest} or {'stale', latest}.
-- A large body comes in a key of its own (stage, written by the same MULTI just before this
-- script): renamed into place, so its bytes never pass through Lua (about 2 ms a megabyte).
local r = saved[1]
local id, workflow, previous = r.id, r.workflow, r.previous
local staged = stage ~= ''
local found = redis.call('GET', pointer)
if found then
  local stored_digest = redis.call('HGET', rkey(tag(found), id), 'd')
  if stored_digest then
    if staged then redis.call('DEL', stage) end
    if fenced then return {'exists', stored_digest, latest_of(tag(workflow), top, false, false) or ''} end
    return stored_digest
  end
end
if fenced then
  local latest = latest_of(tag(workflow), top, false, false) or ''
  -- The latest may be this very checkpoint, indexed with its record lost: saving it restores it.
  if latest ~= expected and latest ~= id then
    if staged then redis.call('DEL', stage) end
    return {'stale', latest}
  end
end
local seq = redis.call('INCR', counter)
-- The home's successor index, beside its top index: same slot. The record's mark says where its
-- rivals may be, should it be the head (lineage.lua: index_top_level); a root always has one.
local successors = nextkey_beside(top)
local mark = index_top_level(successors, previous, r.signature, seq, id)
if staged then
  redis.call('RENAME', stage, record)
  if TTL == 0 then redis.call('PERSIST', record) end  -- the stage's safety-net TTL came along
end
redis.call('HSET', record, record_fields(r, seq, mark, id, not staged))
redis.call('ZADD', top, seq, id)
redis.call('ZADD', signature_index, seq, id)
redis.call('SET', pointer, workflow)
local unindexed = listed(workflow)
if TTL > 0 then
  for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, TTL) end
  if previous ~= '' then redis.call('PEXPIRE', successors, TTL) end
end
if unindexed then return 1 end
return false
