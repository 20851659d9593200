-- Latest through the lineage (docs/contract.md, "Latest"). H:next holds, for every top-level
-- record of home H with a previous id, the member <range><sequence in 16 hex digits>:id (score
-- 0), its range being esc(previous):esc(signature):, so the records naming one previous id with
-- one signature are one lexicographic range, the one committed last first; and each range's
-- marker, the range's name alone, which every read of a range excludes ('(' bound). Roots are
-- in no range: a root's rivals are roots committed right before it, read from the order (the
-- top index; rivals). Records saved before markers were indexed count as no sibling.
local function sibling_range(previous, signature)
  return esc(previous) .. ':' .. esc(signature) .. ':'
end
-- Index a top-level record of H with a previous id (successors: H:next) in its range, with the
-- range's marker, in the ZADD that indexes it: returns true when the marker was there, that is,
-- when another record was saved in the range before this one. The save marks such a record
-- (field 'r'): a head without the mark has no rival, so latest looks for none. A sibling saved
-- after the head takes a higher sequence, so the walk to the head passes it only if it is gone
-- or visited.
local function index_successor(successors, previous, signature, seq, id)
  local range = sibling_range(previous, signature)
  return redis.call('ZADD', successors, 0, range .. string.format('%016x', seq) .. ':' .. id, 0, range) == 1
end
-- Remove a top-level record from H:next, and its range's marker when the range is left empty.
local function unindex_successor(successors, previous, signature, seq, id)
  local range = sibling_range(previous, signature)
  redis.call('ZREM', successors, range .. string.format('%016x', seq) .. ':' .. id)
  if #redis.call('ZRANGEBYLEX', successors, '(' .. range, '[' .. range .. '\255', 'LIMIT', 0, 1) == 0 then
    redis.call('ZREM', successors, range)
  end
end
-- From top-level record id of H (of the given signature), on to the successor committed last,
-- never to one already visited, until a record has none: returns that id, true when the
-- successor the walk stopped at has lost its record (no TTL explains it: reported, never
-- passed over for an older checkpoint), and the id the walk reached it from (its previous id;
-- false when it did not move); with a TTL a successor gone has expired and is passed.
local function tip(H, id, signature)
  local visited = {[id] = true}
  local tail = ':' .. esc(signature) .. ':'
  local from = false
  while true do
    local prefix = esc(id) .. tail
    local members = redis.call('ZREVRANGEBYLEX', nextkey(H), '[' .. prefix .. '\255', '(' .. prefix)
    local following = false
    for _, member in ipairs(members) do
      local candidate = string.sub(member, #prefix + 18)
      if not visited[candidate] then
        if redis.call('EXISTS', rkey(H, candidate)) == 1 then
          following = candidate
          break
        end
        if TTL == 0 then return candidate, true, id end
      end
    end
    if not following then return id, false, from end
    visited[following] = true
    from = id
    id = following
  end
end
-- The rivals of head, a top-level record of H with the given signature that its save marked
-- (field 'r', latest.lua), at most `limit`, in ascending sequence (storages.backend.rivals_of):
-- each a leaf, that no record with the signature continues (no member in its range of H:next).
-- Returns their ids, and the first one whose record is gone with no TTL to explain it (lost: the
-- caller reports it or passes it) or false.
-- * A head with a previous id (marked '1': saved after a sibling, index_successor): the other
--   leaves of its range, the `limit` committed last. With a TTL one gone expired and is passed.
-- * A root head (previous false, marked '0'; the newest root of its signature, and the newest
--   top-level record when newest is true): the top-level records committed right before it,
--   newest first, while each is a leaf root with the signature. Parallel steps that run before
--   a run's first checkpoint save such roots in any order. The first record read is the probe:
--   when the record before the head is anything else (a checkpoint, another signature, a root
--   some checkpoint continues, none) nothing more is read. A record gone with no TTL ends the
--   walk, reported (nothing says whether it rivals); with a TTL it has expired, and so has every
--   record committed before it (records expire oldest first): the walk ends there.
local function rivals(H, head, previous, signature, newest)
  local limit = 64  -- storages.backend.RIVALS_LIMIT (tests/test_redis.py checks they agree)
  local successors = nextkey(H)
  local tail = ':' .. esc(signature) .. ':'
  local newest_first, lost = {}, false
  if previous then
    local prefix = esc(previous) .. tail
    local high, low = '[' .. prefix .. '\255', '(' .. prefix
    local offset, page = 0, 256
    while #newest_first < limit do
      local members = redis.call('ZREVRANGEBYLEX', successors, high, low, 'LIMIT', offset, page)
      for _, member in ipairs(members) do
        local id = string.sub(member, #prefix + 18)
        local own = esc(id) .. tail
        if id ~= head
          and #redis.call('ZRANGEBYLEX', successors, '(' .. own, '[' .. own .. '\255', 'LIMIT', 0, 1) == 0 then
          if redis.call('EXISTS', rkey(H, id)) == 1 then
            newest_first[#newest_first + 1] = id
            if #newest_first == limit then break end
          elseif TTL == 0 and not lost then
            lost = id
          end
        end
      end
      if #members < page then break end
      offset = offset + page
    end
  else
    local top = topkey(H)
    local rank = newest and 0 or redis.call('ZREVRANK', top, head)
    local first, count, more = rank and rank + 1, 1, rank ~= false
    while more do
      local ids = redis.call('ZREVRANGE', top, first, first + count - 1)
      more = #ids == count
      for _, id in ipairs(ids) do
        local fields = redis.call('HMGET', rkey(H, id), 's', 'p')
        local leaf_root = fields[1] == signature and not fields[2]
        if leaf_root then
          local own = esc(id) .. tail
          leaf_root = #redis.call('ZRANGEBYLEX', successors, '(' .. own, '[' .. own .. '\255', 'LIMIT', 0, 1) == 0
        elseif not fields[1] and TTL == 0 and redis.call('EXISTS', rkey(H, id)) == 0 then
          lost = id
        end
        if leaf_root then newest_first[#newest_first + 1] = id end
        if not leaf_root or #newest_first == limit then
          more = false
          break
        end
      end
      first = first + count
      count = limit - #newest_first
    end
  end
  local ids = {}
  for i = #newest_first, 1, -1 do ids[#ids + 1] = newest_first[i] end
  return ids, lost
end
