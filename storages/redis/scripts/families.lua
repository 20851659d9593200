-- Remove a top-level record and everything nested in it; returns {workflow, id, ...} removed.
local function drop_family(H, home, id)
  local members = redis.call('LRANGE', fkey(H, id), 0, -1)
  table.insert(members, 1, id)
  local dropped = {}
  for _, m in ipairs(members) do
    local key = rkey(H, m)
    local f = redis.call('HMGET', key, 'w', 's', 'c', 'p', 'q')
    if f[1] then
      if f[3] then
        if INLINE then redis.call('ZREM', nestedkey(tag(f[1])), nmember(home, m)) end
      else
        redis.call('ZREM', topkey(H), m)
        redis.call('ZREM', sigkey(H, f[2]), m)
        -- A root is in no sibling range; a damaged record without its signature or sequence
        -- names no member.
        if f[4] and f[2] and tonumber(f[5]) then
          unindex_successor(nextkey(H), f[4], f[2], tonumber(f[5]), m)
        end
      end
      redis.call('DEL', key, kkey(H, m))
      if INLINE and redis.call('GET', lockey(m)) == home then redis.call('DEL', lockey(m)) end
      table.insert(dropped, f[1])
      table.insert(dropped, m)
    end
  end
  redis.call('DEL', fkey(H, id))
  return dropped
end
-- Plain Redis: drop from the workflow index home and the workflows of the dropped records
-- ({workflow, id, ...}) that have nothing left: no top-level index, nested index or tombstones.
local function unlist_emptied(home, dropped)
  if not INLINE then return end
  local seen = {}
  local names = {home}
  for i = 1, #dropped, 2 do names[#names + 1] = dropped[i] end
  for _, w in ipairs(names) do
    if not seen[w] then
      seen[w] = true
      local h = tag(w)
      if redis.call('EXISTS', topkey(h), nestedkey(h), tombskey(h)) == 0 then
        redis.call('ZREM', workflowskey(), w)
      end
    end
  end
end
