-- Latest through the lineage (docs/contract.md, "Latest"). H:next holds, for every top-level
-- record of home H with a previous id, the member esc(previous):esc(signature):<sequence in 16
-- hex digits>:id (score 0), so the records naming one previous id with one signature are one
-- lexicographic range, the one committed last first.
local function successor_member(previous, signature, seq, id)
  return esc(previous) .. ':' .. esc(signature) .. ':' .. string.format('%016x', seq) .. ':' .. id
end
-- From top-level record id of H (of the given signature), on to the successor committed last,
-- never to one already visited, until a record has none: returns that id, and true when the
-- successor the walk stopped at has lost its record (no TTL explains it: reported, never
-- passed over for an older checkpoint); with a TTL a successor gone has expired and is passed.
local function tip(H, id, signature)
  local visited = {[id] = true}
  local tail = ':' .. esc(signature) .. ':'
  while true do
    local prefix = esc(id) .. tail
    local members = redis.call('ZREVRANGEBYLEX', H .. ':next', '[' .. prefix .. '\255', '[' .. prefix)
    local following = false
    for _, member in ipairs(members) do
      local candidate = string.sub(member, #prefix + 18)
      if not visited[candidate] then
        if redis.call('EXISTS', rkey(H, candidate)) == 1 then
          following = candidate
          break
        end
        if TTL == 0 then return candidate, true end
      end
    end
    if not following then return id, false end
    visited[following] = true
    id = following
  end
end
