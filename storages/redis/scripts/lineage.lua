-- Latest through the lineage (docs/contract.md, "Latest"): latest_of, at the end, is the one
-- place a script chooses it. H:next holds, for every top-level record of home H with a previous
-- id, the member <range><sequence in 16 hex digits>:id (score 0; successor_member), its range
-- being esc(previous):esc(signature): (sibling_range), so the records naming one previous id
-- with one signature are one lexicographic range, the one committed last first; and each range's
-- marker, the range's name alone, which every read of a range excludes ('(' bound). Roots are
-- in no range: a root's rivals are roots committed right before it, read from the order (the
-- top index). Records saved before markers were indexed count as no sibling.
local function sibling_range(previous, signature)
  return esc(previous) .. ':' .. esc(signature) .. ':'
end
-- The member of H:next that indexes id, in range, with its sequence.
local function successor_member(range, seq, id)
  return range .. string.format('%016x', seq) .. ':' .. id
end
-- The id any member of H:next indexes, false for a range's marker (its range unknown: the two
-- escaped parts hold no ':').
local function indexed_successor(member)
  local _, _, id = string.find(member, '^[^:]*:[^:]*:%x+:(.*)$')
  return id or false
end
-- Index a top-level record of H in the lineage, and return the mark its save writes (field 'r':
-- where its rivals may be should it be the head, latest_of reads it), or false for none. A root
-- is in no sibling range and is always marked, '0': its rivals are the roots committed right
-- before it (the top index). A record with a previous id goes in its range of H:next
-- (successors), with the range's marker, in one ZADD: marked '1' when the marker was there, that
-- is, when another record was saved in the range before this one (its range may hold rivals);
-- else unmarked, and latest looks for no rival of it. A sibling saved after the head takes a
-- higher sequence, so the walk to the head passes it only if it is gone or visited.
local function index_top_level(successors, previous, signature, seq, id)
  if previous == '' then return '0' end
  local range = sibling_range(previous, signature)
  if redis.call('ZADD', successors, 0, successor_member(range, seq, id), 0, range) == 1 then
    return '1'
  end
  return false
end
-- Remove a top-level record from H:next, and its range's marker when the range is left empty.
local function unindex_successor(successors, previous, signature, seq, id)
  local range = sibling_range(previous, signature)
  redis.call('ZREM', successors, successor_member(range, seq, id))
  if #redis.call('ZRANGEBYLEX', successors, '(' .. range, '[' .. range .. '\255', 'LIMIT', 0, 1) == 0 then
    redis.call('ZREM', successors, range)
  end
end
-- The latest of index, home H's top index or one signature's, and the one place a script
-- chooses it: get_latest (latest.lua, with_body and with_rivals), the fences of save.lua and
-- save_one.lua and the cluster fence's answer (latest_head.lua; the head alone) and prune.lua
-- (the head and its rivals) all ask here. One function, not one per step: the server builds a
-- closure for each library function on every call of a script that names it. Returns
-- * id: the head's id; false when the index holds nothing (with a TTL, nothing unexpired);
-- * body: with_body, the head's body, false when it is stored without one (a damaged store,
--   whose rivals are not read); nil without with_body;
-- * lost: a record gone that no TTL explains, where the head or a rival is read (the head's own
--   id when the head is), else false: the reads report it, never an older checkpoint, and a
--   fence compares against it;
-- * others: with_rivals, the rivals' ids, at most `limit`, in ascending sequence (those read
--   before a lost one; storages.backend.rivals_of); nil when there are none.
local function latest_of(H, index, with_body, with_rivals)
  local newest = redis.call('ZREVRANGE', index, 0, 0)
  if #newest == 0 then return false, false, false end
  local id = newest[1]
  local fields
  if with_body then
    fields = redis.call('HMGET', rkey(H, id), 's', 'r', 'b')
  else
    fields = redis.call('HMGET', rkey(H, id), 's', 'r')
  end
  -- HMGET answers false for a field not there: body is false or the body with_body, nil without.
  local signature, marked, body = fields[1], fields[2], fields[3]
  if not signature then
    -- A record without a signature is gone, or damaged: then it is the head, with no lineage.
    if body or redis.call('EXISTS', rkey(H, id)) == 1 then return id, body, false end
    if TTL == 0 then return id, body, id end
    -- With a TTL, records expire oldest first: the newest one gone is expiry only if all are.
    local start = 1
    while true do
      local older = redis.call('ZREVRANGE', index, start, start + 499)
      if #older == 0 then return false, false, false end
      for _, other in ipairs(older) do
        if redis.call('EXISTS', rkey(H, other)) == 1 then return id, body, id end
      end
      start = start + 500
    end
  end
  -- The head: from the newest entry on to the successor committed last (of its signature, that
  -- names it as previous id), never to one already visited, until a record has none. A
  -- successor whose record is gone is lost with no TTL (reported, never passed over for an older
  -- checkpoint); with a TTL it has expired and is passed. `from` is the id the last step came
  -- from: the head's previous id.
  local successors = nextkey(H)
  local tail = ':' .. esc(signature) .. ':'
  local visited, from = {[id] = true}, false
  while true do
    local range = esc(id) .. tail
    local members = redis.call('ZREVRANGEBYLEX', successors, '[' .. range .. '\255', '(' .. range)
    local following = false
    for _, member in ipairs(members) do
      local candidate = string.sub(member, #range + 18)  -- past successor_member's sequence
      if not visited[candidate] then
        if redis.call('EXISTS', rkey(H, candidate)) == 1 then
          following = candidate
          break
        end
        if TTL == 0 then return candidate, false, candidate end
      end
    end
    if not following then break end
    visited[following] = true
    from = id
    id = following
  end
  if id ~= newest[1] then
    if with_body then
      local moved = redis.call('HMGET', rkey(H, id), 'b', 'r')
      body, marked = moved[1], moved[2]
    elseif with_rivals then
      marked = redis.call('HGET', rkey(H, id), 'r')
    end
  end
  -- Only a head its save marked (field 'r', index_top_level) can have rivals, each a leaf: a
  -- record no record with the signature continues (no member in its own range of H:next).
  if not (with_rivals and marked) or body == false then return id, body, false end
  local limit = 64  -- storages.backend.RIVALS_LIMIT (tests/test_redis.py checks they agree)
  local newest_first, lost = {}, false
  if marked ~= '0' then
    -- A head saved after a sibling ('1'): the other leaves of its range, the `limit` committed
    -- last. With a TTL one gone expired and is passed.
    local previous = from or redis.call('HGET', rkey(H, id), 'p')
    if not previous then return id, body, false end  -- a damaged record: marked '1', no previous id
    local range = esc(previous) .. tail  -- sibling_range(previous, signature), built here
    local high, low = '[' .. range .. '\255', '(' .. range
    local offset, page = 0, 256
    while #newest_first < limit do
      local members = redis.call('ZREVRANGEBYLEX', successors, high, low, 'LIMIT', offset, page)
      for _, member in ipairs(members) do
        local other = string.sub(member, #range + 18)  -- past successor_member's sequence
        local own = esc(other) .. tail
        if other ~= id
          and #redis.call('ZRANGEBYLEX', successors, '(' .. own, '[' .. own .. '\255', 'LIMIT', 0, 1) == 0 then
          if redis.call('EXISTS', rkey(H, other)) == 1 then
            newest_first[#newest_first + 1] = other
            if #newest_first == limit then break end
          elseif TTL == 0 and not lost then
            lost = other
          end
        end
      end
      if #members < page then break end
      offset = offset + page
    end
  else
    -- A root head ('0'; the newest root of its signature, and the newest top-level record when
    -- index is the top index): the top-level records committed right before it, newest first,
    -- while each is a leaf root with the signature. Parallel steps that run before a run's
    -- first checkpoint save such roots in any order. The first record read is the probe: when
    -- the record before the head is anything else (a checkpoint, another signature, a root some
    -- checkpoint continues, none) nothing more is read. A record gone with no TTL ends the walk,
    -- reported (nothing says whether it rivals); with a TTL it has expired, and so has every
    -- record committed before it (records expire oldest first): the walk ends there.
    local top = topkey(H)
    local rank = index == top and 0 or redis.call('ZREVRANK', top, id)
    local first, count, more = rank and rank + 1, 1, rank ~= false
    while more do
      local ids = redis.call('ZREVRANGE', top, first, first + count - 1)
      more = #ids == count
      for _, other in ipairs(ids) do
        local other_fields = redis.call('HMGET', rkey(H, other), 's', 'p')
        local leaf_root = other_fields[1] == signature and not other_fields[2]
        if leaf_root then
          local own = esc(other) .. tail
          leaf_root = #redis.call('ZRANGEBYLEX', successors, '(' .. own, '[' .. own .. '\255', 'LIMIT', 0, 1) == 0
        elseif not other_fields[1] and TTL == 0 and redis.call('EXISTS', rkey(H, other)) == 0 then
          lost = other
        end
        if leaf_root then newest_first[#newest_first + 1] = other end
        if not leaf_root or #newest_first == limit then
          more = false
          break
        end
      end
      first = first + count
      count = limit - #newest_first
    end
  end
  if #newest_first == 0 then return id, body, lost end
  local others = {}
  for i = #newest_first, 1, -1 do others[#others + 1] = newest_first[i] end
  return id, body, lost, others
end
