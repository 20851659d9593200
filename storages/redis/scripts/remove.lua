-- Delete a top-level record and everything nested in it. Returns {'missing'},
-- {'nested', container} (a nested record is deleted only with its container) or
-- {'deleted', {workflow, id, ...} removed}.
local found = locate(id, given_home)
if not found then return {'missing'} end
local H = tag(found)
local f = redis.call('HMGET', rkey(H, id), 'w', 'c')
if not f[1] then return {'missing'} end
if f[2] then return {'nested', f[2]} end
local dropped = drop_family(H, found, id)
unlist_emptied(found, dropped)
return {'deleted', dropped}
