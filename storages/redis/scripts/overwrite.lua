-- Replace a stored record's body (raw access). The digest is kept: it records what was saved,
-- so a re-save still compares contents. 1 if replaced, 0 if not stored.
local found = locate(id, given_home)
if not found then return 0 end
local key = rkey(tag(found), id)
if redis.call('EXISTS', key) == 0 then return 0 end
redis.call('HSET', key, 'b', body)
return 1
