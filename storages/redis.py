"""Redis storage: plain Redis 6.2+ or Valkey, single server or cluster, no modules (needs ``redis``).

Key layout (``P`` is the key prefix, ``esc()`` percent-escapes ``%``, ``{``, ``}`` and ``:``, so no
id or name can end a hash tag early, add a key level, or collide with another key)::

    P:{esc(W)}:seq              workflow W's sequence counter (INCR; never deleted, never goes back)
    P:{esc(W)}:top              sorted set: W's top-level ids, score = sequence
    P:{esc(W)}:sig:esc(S)       sorted set: W's top-level ids saved with graph signature S
    P:{esc(W)}:nested           sorted set: records named W nested in any checkpoint,
                                member "esc(home):esc(id)", score = sequence
    P:{esc(W)}:tombs            set: ids pruned from W
    P:{esc(H)}:r:esc(id)        hash: one record stored in home H (body, digest, index fields)
    P:{esc(H)}:k:esc(id)        list: the direct children of a record, in the order met
    P:{esc(H)}:f:esc(id)        list: every record nested (at any depth) in top-level record id
    P:{esc(id)}:loc             string: the home of record id (load() only has an id)
    P:{esc(id)}:pruned          string: the workflow id was pruned from (walks report PRUNED)

The part in braces is the hash tag: every key of one workflow sits in one cluster slot. A record's
*home* is the workflow of the top-level checkpoint it was saved with: nested records live in their
container's slot, whatever their own workflow name, so a checkpoint and everything embedded in it
are written by one script.

Why it is correct:

* Every primitive is one Lua script (atomic on the server). On plain Redis a save, including its
  nested records, location pointers and per-name nested index, is exactly one round trip; so is a
  delete, a prune, an ancestry walk (the script follows previous ids server-side, depth-guarded
  and cycle-safe), and a load or latest (the script returns the bodies of the checkpoint's nested
  records with its own, so a sub-workflow checkpoint decodes from one consistent read). Listing
  reads the sorted set in pages of :data:`PAGE_SIZE`, one script call per page. The commonest
  save, one top-level checkpoint with nothing nested, runs a leaner script (``save_one``) that is
  handed its key names and does only the six commands that case needs; a test checks it leaves
  exactly what the general script leaves.
* Latest is ``ZREVRANGE P:{W}:top 0 0``: O(log n) whatever the history size. Sequences come from
  ``INCR`` inside the save script, so they follow commit order and survive deletes.
* A save whose top id exists writes nothing and returns the stored digest; the base then decides
  equal (no-op) or conflict. So redis-py's retry of a save after an ambiguous connection failure
  is harmless: the retried script finds the record the first attempt wrote.
* Connection problems are retried by redis-py (``Retry`` with exponential backoff); past them the
  operation raises :class:`~storages.errors.StorageUnavailableError` naming the operation.

On a Redis Cluster a script may only touch keys of one slot, so the cross-slot parts move to the
client: a save first claims each id's location pointer (idempotently: an existing pointer whose
record is gone is stale and taken over), and for nested records takes their sequence numbers from
their own names' counters and adds them to those names' nested indexes; then one script in the
home slot writes the checkpoint. A crash between leaves only pointers and index entries to records
that do not exist, which every read treats as "not found" (and latest/listing skip), never as
corrupt. Loads take two round trips (pointer, then record); an ancestry walk takes one script per
slot it enters (a chain that hops into another workflow's nested record costs one more call); a
delete or prune cleans the other slots' pointers after its script. Two saves of one id under two
different workflows racing on a cluster may both succeed (the pointer names the later one).

TTL (optional, per storage): every key a save writes gets the TTL, so a checkpoint's keys expire
together, and the per-workflow sets are refreshed on each save so they outlive their members.
Records expire oldest first, so listing skips index entries older than every record still
stored (prune removes them); a walk that reaches an expired ancestor reports it MISSING, never
corrupt. A workflow idle for longer than the TTL disappears entirely, its counter with it.

Reads never write, and never answer with something other than what was asked for: an index
entry whose record is gone and which expiry does not explain (no TTL, or a record newer than one
still stored) was lost, evicted or deleted behind the storage's back, and ``get_latest`` and
listing raise :class:`~storages.errors.CheckpointCorruptedError` naming it instead of answering
with an older checkpoint or a shorter list. To keep loss from happening, the storage refuses a
server whose ``maxmemory-policy`` may evict its keys (``allkeys-*``; with a TTL also
``volatile-lru``, ``-lfu`` and ``-random``) unless told otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import weakref
from collections.abc import Awaitable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis import exceptions as redis_errors
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS, parse_url
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from typing_extensions import Self

from . import urls
from .base import BaseCheckpointStorage, CheckpointRecord, FenceCheck, IndexEntry, StoredBody, WalkRecords
from .codec import CheckpointCodec, TypeRef
from .contract import Capability, CheckpointID, CheckpointInfo
from .errors import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    EvictionPolicyError,
    NestedCheckpointDeletionError,
    StorageConfigurationError,
    StorageUnavailableError,
)
from .integrity import IntegrityKeyInput
from .redaction import chainable, redact_text, redact_url

DEFAULT_PREFIX = "checkpoints"
RETRIES = 3
"""Connection errors and timeouts are retried this many times, with exponential backoff."""
MAX_CONNECTIONS = 64
"""Connections per handle built from a URL; more concurrent operations wait for one."""
CONNECTION_WAIT_SECONDS = 30.0
"""How long an operation waits for a free connection before failing."""
PAGE_SIZE = 500
"""Listing reads the index in pages of this many ids, one script call per page."""

_logger = logging.getLogger(__name__)

_EVICTS_KEYS_WITH_TTL = frozenset({"volatile-lru", "volatile-lfu", "volatile-random"})
"""Policies that evict keys with a TTL in any order. ``volatile-ttl`` evicts the soonest to
expire first, which for this storage's keys is early expiry in save order, as TTL itself does."""

_BASE_CAPABILITIES = frozenset(
    {
        Capability.SIGNATURE_FILTER,
        Capability.ANCESTRY,
        Capability.NESTED,
        Capability.PRUNE,
        Capability.LIST_WORKFLOWS,
        Capability.RAW_ACCESS,
        Capability.INSPECT,
        Capability.PENDING_WRITES,
        Capability.SHARED,
        Capability.DURABLE,
        Capability.FENCING,
    }
)

# ---------------------------------------------------------------------- Lua

# Every script starts with ARGV[1] = prefix, ARGV[2] = "1" when it may reach keys of any slot
# (plain Redis) or "0" (cluster: its own slot only), ARGV[3] = TTL in ms ("0" for none).
_PRELUDE = r"""
local P, INLINE, TTL = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])
local function escape_char(c) return string.format('%%%02X', string.byte(c)) end
local function esc(s)
  if not string.find(s, '[%%{}:]') then return s end
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
-- Remove a top-level record and everything nested in it; returns {workflow, id, ...} removed.
local function drop_family(H, home, id)
  local members = redis.call('LRANGE', fkey(H, id), 0, -1)
  table.insert(members, 1, id)
  local dropped = {}
  for _, m in ipairs(members) do
    local key = rkey(H, m)
    local f = redis.call('HMGET', key, 'w', 's', 'c')
    if f[1] then
      if f[3] then
        if INLINE then redis.call('ZREM', tag(f[1]) .. ':nested', nmember(home, m)) end
      else
        redis.call('ZREM', H .. ':top', m)
        redis.call('ZREM', sigkey(H, f[2]), m)
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
-- Workflow w's latest top-level id ('' for none): the newest index entry whose record exists,
-- dropping entries whose record expired, as the latest script does.
local function head(w)
  local H = tag(w)
  while true do
    local ids = redis.call('ZREVRANGE', H .. ':top', 0, 0)
    if #ids == 0 then return '' end
    if redis.call('EXISTS', rkey(H, ids[1])) == 1 then return ids[1] end
    redis.call('ZREM', H .. ':top', ids[1])
  end
end
-- Bodies of every record nested, at any depth, in record id of home H, appended to out.
local function descendants(H, id, out)
  local pending = redis.call('LRANGE', kkey(H, id), 0, -1)
  while #pending > 0 do
    local child = table.remove(pending)
    local body = redis.call('HGET', rkey(H, child), 'b')
    if body then
      table.insert(out, child)
      table.insert(out, body)
      for _, grandchild in ipairs(redis.call('LRANGE', kkey(H, child), 0, -1)) do
        table.insert(pending, grandchild)
      end
    end
  end
end
"""

# ARGV[4] home workflow, ARGV[5] record count, then 9 fields per record: id, workflow, previous
# id ('' for none), signature, body, digest, container ('' at top level), position, sequence
# ('' to take the next from the counter here); then, for a fenced save only, '1' and the expected
# latest id ('' for none). Returns {'ok'}, {'exists', digest} or {'conflict', id}; fenced:
# {'exists', digest, latest} or {'stale', latest} too.
_SAVE = r"""
local W, n = ARGV[4], tonumber(ARGV[5])
local H = tag(W)
local FENCED, EXPECTED = ARGV[6 + n * 9] == '1', ARGV[7 + n * 9]
local records = {}
for i = 0, n - 1 do
  local b = 6 + i * 9
  records[i + 1] = {id = ARGV[b], wf = ARGV[b + 1], prev = ARGV[b + 2], sig = ARGV[b + 3],
    body = ARGV[b + 4], digest = ARGV[b + 5], container = ARGV[b + 6], pos = ARGV[b + 7],
    seq = ARGV[b + 8]}
end
-- The key of the record stored under id, if any. On plain Redis every record has a location
-- pointer written by the same script, so no pointer means no record, wherever it would live.
local function stored(id)
  local key
  if INLINE then
    local home = redis.call('GET', lockey(id))
    if not home then return false end
    key = rkey(tag(home), id)
  else
    key = rkey(H, id)
  end
  if redis.call('EXISTS', key) == 1 then return key end
  return false
end
local top = records[1]
local existing = stored(top.id)
if existing then
  if FENCED then return {'exists', redis.call('HGET', existing, 'd'), head(W)} end
  return {'exists', redis.call('HGET', existing, 'd')}
end
if FENCED then
  local latest = head(W)
  if latest ~= EXPECTED then return {'stale', latest} end
end
for i = 2, n do
  if stored(records[i].id) then return {'conflict', records[i].id} end
end
for i = 1, n do
  local r = records[i]
  local seq = r.seq
  if seq == '' then
    local counter = tag(r.wf) .. ':seq'
    seq = redis.call('INCR', counter)
    touch(counter)
  end
  local key = rkey(H, r.id)
  local fields = {'b', r.body, 'd', r.digest, 'w', r.wf, 's', r.sig, 'q', seq, 'n', r.pos}
  if r.prev ~= '' then table.insert(fields, 'p'); table.insert(fields, r.prev) end
  if r.container ~= '' then
    table.insert(fields, 'c'); table.insert(fields, r.container)
    table.insert(fields, 'o'); table.insert(fields, top.id)
  end
  redis.call('HSET', key, unpack(fields))
  touch(key)
  if r.container == '' then
    local signature = sigkey(H, r.sig)
    redis.call('ZADD', H .. ':top', seq, r.id)
    redis.call('ZADD', signature, seq, r.id)
    touch(H .. ':top')
    touch(signature)
  else
    redis.call('RPUSH', kkey(H, r.container), r.id)
    touch(kkey(H, r.container))
    redis.call('RPUSH', fkey(H, top.id), r.id)
    touch(fkey(H, top.id))
    if INLINE then
      local index = tag(r.wf) .. ':nested'
      redis.call('ZADD', index, 'NX', seq, nmember(W, r.id))
      touch(index)
    end
  end
  if INLINE then
    local pointer = lockey(r.id)
    redis.call('SET', pointer, W)
    touch(pointer)
  end
end
return {'ok'}
"""

# The common save on plain Redis, one top-level record with nothing nested: the same writes as
# _SAVE for that case with the key names given, so the server does only the six commands.
# KEYS: the id's location pointer, its record, the workflow's counter, top index and signature
# index. ARGV[4] workflow, ARGV[5] id, ARGV[6] body, ARGV[7] digest, ARGV[8] signature,
# ARGV[9] previous id ('' for none); for a fenced save only, ARGV[10] '1' and ARGV[11] the
# expected latest id ('' for none). Returns false when written, else the stored digest; fenced:
# {'exists', digest, latest} or {'stale', latest}.
_SAVE_ONE = r"""
local pointer, record = KEYS[1], KEYS[2]
local FENCED = ARGV[10] == '1'
local home = redis.call('GET', pointer)
if home then
  local digest = redis.call('HGET', rkey(tag(home), ARGV[5]), 'd')
  if digest then
    if FENCED then return {'exists', digest, head(ARGV[4])} end
    return digest
  end
end
if FENCED then
  local latest = head(ARGV[4])
  if latest ~= ARGV[11] then return {'stale', latest} end
end
local seq = redis.call('INCR', KEYS[3])
if ARGV[9] == '' then
  redis.call('HSET', record, 'b', ARGV[6], 'd', ARGV[7], 'w', ARGV[4], 's', ARGV[8], 'q', seq, 'n', '0')
else
  redis.call('HSET', record, 'b', ARGV[6], 'd', ARGV[7], 'w', ARGV[4], 's', ARGV[8], 'q', seq, 'n', '0',
    'p', ARGV[9])
end
redis.call('ZADD', KEYS[4], seq, ARGV[5])
redis.call('ZADD', KEYS[5], seq, ARGV[5])
redis.call('SET', pointer, ARGV[4])
for i = 1, 5 do touch(KEYS[i]) end
return false
"""

# Cluster only, on KEYS[1] = P:{id}:loc: point it at ARGV[4] unless it names another home,
# which is returned (the client checks whether that record still exists).
_CLAIM = r"""
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[4] and ARGV[5] ~= '1' then return current end
redis.call('SET', KEYS[1], ARGV[4])
touch(KEYS[1])
return false
"""

# Cluster only: delete KEYS[1] if it holds ARGV[4] (a pointer still naming the record removed).
_UNLINK_IF = r"""
if redis.call('GET', KEYS[1]) == ARGV[4] then redis.call('DEL', KEYS[1]) end
return 1
"""

# ARGV[4] id, ARGV[5] home given by a cluster client, ARGV[6] what to read:
# 'body' -> {body, {id, body, ...} of its descendants, workflow, previous, signature};
# 'info' -> {workflow, previous, signature, container, sequence, size};
# 'children' -> {ids...} (false if absent); 'nested' -> {id, body, ...} of its descendants.
_READ = r"""
local id = ARGV[4]
local home = locate(id, ARGV[5])
if not home then return false end
local H = tag(home)
local key = rkey(H, id)
local what = ARGV[6]
if what == 'body' then
  local f = redis.call('HMGET', key, 'b', 'w', 'p', 's')
  if not f[1] then return false end
  local nested = {}
  descendants(H, id, nested)
  return {f[1], nested, f[2], f[3], f[4]}
end
if redis.call('EXISTS', key) == 0 then return false end
if what == 'info' then
  local f = redis.call('HMGET', key, 'w', 'p', 's', 'c', 'q')
  return {f[1], f[2], f[3], f[4], f[5], redis.call('HSTRLEN', key, 'b')}
end
if what == 'children' then return {redis.call('LRANGE', kkey(H, id), 0, -1)} end
local out = {}
descendants(H, id, out)
return out
"""

# ARGV[4] home, ARGV[5] 'body' or 'info', ARGV[6..] ids stored in that home. Per id: false if
# absent, else {body, signature, sequence} or {workflow, previous, signature, container, sequence, size}.
_FETCH = r"""
local H = tag(ARGV[4])
local out = {}
for i = 6, #ARGV do
  local key = rkey(H, ARGV[i])
  if ARGV[5] == 'body' then
    local f = redis.call('HMGET', key, 'b', 's', 'q')
    if f[1] then out[#out + 1] = f else out[#out + 1] = false end
  else
    local f = redis.call('HMGET', key, 'w', 'p', 's', 'c', 'q')
    if f[1] then
      out[#out + 1] = {f[1], f[2], f[3], f[4], f[5], redis.call('HSTRLEN', key, 'b')}
    else
      out[#out + 1] = false
    end
  end
end
return out
"""

# KEYS[1] an index of ARGV[4]'s home (top or signature set). Reads only. Returns false for an
# empty index, {id, body, {id, body, ...} of its descendants} for the newest entry, or {id} alone
# when the newest entry's record is gone and expiry does not explain it: never an older entry.
_LATEST = r"""
local H = tag(ARGV[4])
local newest = redis.call('ZREVRANGE', KEYS[1], 0, 0)
if #newest == 0 then return false end
local id = newest[1]
local body = redis.call('HGET', rkey(H, id), 'b')
if body then
  local nested = {}
  descendants(H, id, nested)
  return {id, body, nested}
end
if TTL == 0 then return {id} end
-- With a TTL, records expire oldest first: the newest one gone is expiry only if all are gone.
local start = 1
while true do
  local older = redis.call('ZREVRANGE', KEYS[1], start, start + 499)
  if #older == 0 then return false end
  for _, other in ipairs(older) do
    if redis.call('EXISTS', rkey(H, other)) == 1 then return {id} end
  end
  start = start + 500
end
"""

# KEYS[1] an index of ARGV[4]'s home; one page of ARGV[6] entries with score > ARGV[5];
# ARGV[7] = '1' for bodies. Reads only. Returns {{id, score, body-or-false, ...} of entries with
# a record, last score or false, {id, score, ...} of entries whose record is gone}.
_PAGE = r"""
local H = tag(ARGV[4])
local rows = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[5], '+inf', 'WITHSCORES',
  'LIMIT', 0, tonumber(ARGV[6]))
local out, gone = {}, {}
for i = 1, #rows, 2 do
  local key = rkey(H, rows[i])
  local body = false
  if ARGV[7] == '1' then body = redis.call('HGET', key, 'b') end
  if body or (ARGV[7] ~= '1' and redis.call('EXISTS', key) == 1) then
    out[#out + 1] = rows[i]; out[#out + 1] = rows[i + 1]; out[#out + 1] = body
  else
    gone[#gone + 1] = rows[i]; gone[#gone + 1] = rows[i + 1]
  end
end
local last = false
if #rows == 2 * tonumber(ARGV[6]) then last = rows[#rows] end
return {out, last, gone}
"""

# ARGV[4] id, ARGV[5] home given by a cluster client. Returns {'missing'}, {'nested', container}
# or {'deleted', {workflow, id, ...}}.
_REMOVE = r"""
local id = ARGV[4]
local home = locate(id, ARGV[5])
if not home then return {'missing'} end
local H = tag(home)
local f = redis.call('HMGET', rkey(H, id), 'w', 'c')
if not f[1] then return {'missing'} end
if f[2] then return {'nested', f[2]} end
return {'deleted', drop_family(H, home, id)}
"""

# ARGV[4] workflow, ARGV[5] keep_last. Returns {top-level count, {workflow, id, ...} removed}.
_PRUNE = r"""
local W, keep = ARGV[4], tonumber(ARGV[5])
local H = tag(W)
for _, id in ipairs(redis.call('ZRANGE', H .. ':top', 0, -1)) do
  if redis.call('EXISTS', rkey(H, id)) == 0 then redis.call('ZREM', H .. ':top', id) end
end
local count = redis.call('ZCARD', H .. ':top')
if count <= keep then return {0, {}} end
local doomed = redis.call('ZRANGE', H .. ':top', 0, count - keep - 1)
local removed = {}
for _, id in ipairs(doomed) do
  local dropped = drop_family(H, W, id)
  for i = 2, #dropped, 2 do
    redis.call('SADD', H .. ':tombs', dropped[i])
    if INLINE then
      redis.call('SET', prunedkey(dropped[i]), W)
      touch(prunedkey(dropped[i]))
    end
    removed[#removed + 1] = dropped[i - 1]
    removed[#removed + 1] = dropped[i]
  end
end
touch(H .. ':tombs')
return {#doomed, removed}
"""

# ARGV[4] workflow. Returns {top-level count, {workflow, id, ...} removed, {tombstoned ids}}.
_DELETE_WORKFLOW = r"""
local W = ARGV[4]
local H = tag(W)
local count, removed = 0, {}
for _, id in ipairs(redis.call('ZRANGE', H .. ':top', 0, -1)) do
  local dropped = drop_family(H, W, id)
  if #dropped > 0 then count = count + 1 end
  for _, item in ipairs(dropped) do removed[#removed + 1] = item end
end
redis.call('DEL', H .. ':top')
local tombs = redis.call('SMEMBERS', H .. ':tombs')
if INLINE then
  for _, id in ipairs(tombs) do
    if redis.call('GET', prunedkey(id)) == W then redis.call('DEL', prunedkey(id)) end
  end
end
redis.call('DEL', H .. ':tombs')
return {count, removed, tombs}
"""

# ARGV[4] start id, ARGV[5] its home given by a cluster client, ARGV[6] max records, ARGV[7] '1'
# for bodies. Follows previous ids while it can; returns {{id, previous, ...}, {id, body, ...},
# {tombstoned ids}, id it could not resolve in this slot (cluster) or false}.
_WALK = r"""
local current, depth, with_bodies = ARGV[4], tonumber(ARGV[6]), ARGV[7] == '1'
local home = locate(current, ARGV[5])
local links, bodies, tombs, seen, n = {}, {}, {}, {}, 0
local unresolved = false
-- Reads the previous id (and the body) of id in home h; false if it is not stored there.
local function read(h, id)
  if not h then return false end
  local key = rkey(tag(h), id)
  local f
  if with_bodies then
    f = redis.call('HMGET', key, 'q', 'p', 'b')
  else
    f = redis.call('HMGET', key, 'q', 'p')
  end
  if not f[1] then return false end
  return f
end
while current and not seen[current] and n < depth do
  local f = read(home, current)
  if not f and INLINE and n > 0 then
    -- Most links stay in their workflow; one that leaves it is found through its pointer.
    home = redis.call('GET', lockey(current))
    f = read(home, current)
  end
  if not f then
    if INLINE then
      if redis.call('EXISTS', prunedkey(current)) == 1 then tombs[#tombs + 1] = current end
    else
      unresolved = current
    end
    break
  end
  seen[current] = true
  n = n + 1
  links[#links + 1] = current
  links[#links + 1] = f[2]
  if with_bodies then
    bodies[#bodies + 1] = current
    bodies[#bodies + 1] = f[3]
    descendants(tag(home), current, bodies)
  end
  current = f[2]
end
return {links, bodies, tombs, unresolved}
"""

# ARGV[4] id, ARGV[5] home given by a cluster client, ARGV[6] new body. 1 if replaced.
_OVERWRITE = r"""
local id = ARGV[4]
local home = locate(id, ARGV[5])
if not home then return 0 end
local key = rkey(tag(home), id)
if redis.call('EXISTS', key) == 0 then return 0 end
-- The digest is kept: it records what was saved, so a re-save still compares contents.
redis.call('HSET', key, 'b', ARGV[6])
return 1
"""

_SCRIPTS = {
    name: _PRELUDE + text
    for name, text in {
        "save": _SAVE,
        "save_one": _SAVE_ONE,
        "claim": _CLAIM,
        "unlink_if": _UNLINK_IF,
        "read": _READ,
        "fetch": _FETCH,
        "latest": _LATEST,
        "page": _PAGE,
        "remove": _REMOVE,
        "prune": _PRUNE,
        "delete_workflow": _DELETE_WORKFLOW,
        "walk": _WALK,
        "overwrite": _OVERWRITE,
    }.items()
}


def script_sha(name: str) -> str:
    """SHA1 of one of the storage's scripts (``save``, ``walk``, ...), as sent with EVALSHA."""
    # Redis names scripts by their SHA1; nothing here relies on it being hard to collide.
    return hashlib.sha1(_SCRIPTS[name].encode(), usedforsecurity=False).hexdigest()


# ---------------------------------------------------------------------- keys (mirrors the Lua)

_ESCAPED = re.compile(r"[%{}:]")
_UNESCAPE = re.compile(r"%([0-9A-F]{2})")
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


def escape(text: str) -> str:
    """``%``, ``{``, ``}`` and ``:`` as ``%XX``: what the key layout puts ids and names through."""
    return _ESCAPED.sub(lambda match: f"%{ord(match.group()):02X}", text)


def unescape(text: str) -> str:
    return _UNESCAPE.sub(lambda match: chr(int(match.group(1), 16)), text)


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """Key names of one prefix; the Lua scripts build the same names."""

    prefix: str

    def tag(self, workflow_name: str) -> str:
        return f"{self.prefix}:{{{escape(workflow_name)}}}"

    def sequence(self, workflow_name: str) -> str:
        return self.tag(workflow_name) + ":seq"

    def top(self, workflow_name: str) -> str:
        return self.tag(workflow_name) + ":top"

    def signature(self, workflow_name: str, signature: str) -> str:
        return f"{self.tag(workflow_name)}:sig:{escape(signature)}"

    def nested(self, workflow_name: str) -> str:
        return self.tag(workflow_name) + ":nested"

    def tombstones(self, workflow_name: str) -> str:
        return self.tag(workflow_name) + ":tombs"

    def record(self, home: str, checkpoint_id: CheckpointID) -> str:
        return f"{self.tag(home)}:r:{escape(checkpoint_id)}"

    def location(self, checkpoint_id: CheckpointID) -> str:
        return self.tag(checkpoint_id) + ":loc"

    def written_by_save(self, workflow_name: str, checkpoint_id: CheckpointID, signature: str) -> list[str]:
        """The keys a one-record save writes: location, record, sequence, top, signature."""
        return [
            self.location(checkpoint_id),
            self.record(workflow_name, checkpoint_id),
            self.sequence(workflow_name),
            self.top(workflow_name),
            self.signature(workflow_name, signature),
        ]

    def pruned(self, checkpoint_id: CheckpointID) -> str:
        return self.tag(checkpoint_id) + ":pruned"

    def pattern(self, kind: str) -> str:
        """SCAN pattern of one per-workflow key kind (``top``, ``nested``, ``tombs``)."""
        return _GLOB_SPECIAL.sub(r"\\\1", self.prefix) + ":{*}:" + kind

    def workflow_of(self, key: str, kind: str) -> str:
        """The workflow name in a key matched by :meth:`pattern`."""
        inner = key[len(self.prefix) + 2 : -(len(kind) + 2)]
        return unescape(inner)


def _nested_member(home: str, checkpoint_id: CheckpointID) -> str:
    return f"{escape(home)}:{escape(checkpoint_id)}"


def _split_member(member: str) -> tuple[str, CheckpointID]:
    home, _, checkpoint_id = member.partition(":")
    return unescape(home), unescape(checkpoint_id)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _optional_id(value: Any) -> CheckpointID | None:
    """An id from a script, where '' stands for none."""
    text = _optional_text(value)
    return text or None


# ---------------------------------------------------------------------- the storage


class RedisCheckpointStorage(BaseCheckpointStorage):
    """Checkpoints on a Redis server or cluster, under a key prefix.

    Give either ``client`` (a ``redis.asyncio.Redis`` or ``RedisCluster`` you own and close; it
    must not decode responses) or ``url`` (the storage builds and closes its own client; every
    :meth:`new_handle` gets its own connection pool). ``ttl`` in seconds makes checkpoints expire.

    On first use the storage reads the server's ``maxmemory-policy`` (every node's, on a cluster)
    and refuses one that may evict its keys (``allkeys-*``; with ``ttl``, under which every key
    has a TTL, also ``volatile-lru``, ``-lfu`` and ``-random``) with
    :class:`~storages.errors.EvictionPolicyError`: such a server loses checkpoints silently.
    ``allow_evicting_policy=True`` skips the check, for those who accept the risk (or know the
    server cannot evict, as an in-process fake).
    """

    capabilities: ClassVar[frozenset[Capability]] = _BASE_CAPABILITIES

    def __init__(
        self,
        client: Redis | RedisCluster | None = None,
        *,
        url: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        ttl: float | None = None,
        codec: CheckpointCodec | None = None,
        client_options: Mapping[str, Any] | None = None,
        allowed_checkpoint_types: Iterable[TypeRef] = (),
        allowed_modules: Iterable[str] = (),
        integrity_key: IntegrityKeyInput | None = None,
        allow_evicting_policy: bool = False,
    ) -> None:
        super().__init__(
            codec=codec,
            allowed_checkpoint_types=allowed_checkpoint_types,
            allowed_modules=allowed_modules,
            integrity_key=integrity_key,
        )
        if (client is None) == (url is None):
            raise StorageConfigurationError("RedisCheckpointStorage needs exactly one of client= or url=")
        if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
            raise StorageConfigurationError(
                f"Redis key prefix must be a non-empty str without braces (they would break the "
                f"hash tags), got {prefix!r}"
            )
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0 or ttl == float("inf")
        ):
            raise StorageConfigurationError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
        if not isinstance(allow_evicting_policy, bool):
            raise StorageConfigurationError(
                f"allow_evicting_policy must be True or False, got {allow_evicting_policy!r}"
            )
        if client is not None:
            _check_client(client)
        self._allow_evicting_policy = allow_evicting_policy
        self._policy_checked = allow_evicting_policy
        self._injected = client
        self._url = url
        self._client_options = dict(client_options or {})
        self._client: Any = client
        self._keys = RedisKeys(prefix)
        self._ttl = ttl
        self._ttl_ms = "0" if ttl is None else str(max(1, round(ttl * 1000)))
        self._cluster = isinstance(client, RedisCluster) if client is not None else _url_is_cluster(url)
        self._scripts: dict[str, Any] = {}
        self._abandoned: weakref.finalize[Any, Any] | None = None
        if ttl is not None:
            # An instance attribute: TTL is a per-storage setting, so is its capability.
            self.capabilities = _BASE_CAPABILITIES | {Capability.TTL}  # type: ignore[misc]

    @classmethod
    def from_url(cls, url: str, *, codec: CheckpointCodec | None = None, **client_options: Any) -> Self:
        """``redis://[user:password@]host:port/db?prefix=...&ttl=...``, ``rediss://`` for TLS;
        add ``cluster=true`` for a Redis Cluster (any node as the seed) and
        ``allow_evicting_policy=true`` to accept a maxmemory-policy that may evict checkpoints.
        Other query options go to redis-py."""
        if not isinstance(url, str) or urlsplit(url).scheme.lower() not in ("redis", "rediss"):
            raise StorageConfigurationError(f"Not a Redis URL: {url!r}; expected redis:// or rediss://")
        options = url_options(url)
        prefix = options.get("prefix", DEFAULT_PREFIX)
        ttl_text = options.get("ttl")
        try:
            ttl = None if ttl_text in (None, "") else float(ttl_text)
        except ValueError:
            raise StorageConfigurationError(
                f"Redis URL {url!r}: ttl must be seconds, got {ttl_text!r}"
            ) from None
        return cls(
            url=url,
            prefix=prefix,
            ttl=ttl,
            codec=codec,
            client_options=client_options,
            allow_evicting_policy=_url_flag(url, "allow_evicting_policy"),
            **urls.allowance_options(options),
        )

    @property
    def prefix(self) -> str:
        return self._keys.prefix

    @property
    def ttl(self) -> float | None:
        """Seconds a checkpoint lives after its save, or None."""
        return self._ttl

    @property
    def cluster(self) -> bool:
        return self._cluster

    @property
    def keys(self) -> RedisKeys:
        return self._keys

    def describe(self) -> str:
        if self._url is not None:
            parts = urlsplit(self._url)
            host = parts.hostname or "localhost"
            port = f":{parts.port}" if parts.port else ""
            return f"{parts.scheme}://{host}{port}{parts.path} (prefix {self.prefix!r})"
        kind = "redis cluster" if self._cluster else "redis"
        return f"{kind} client (prefix {self.prefix!r})"

    def new_handle(self) -> Self:
        handle = type(self)(
            self._injected,
            url=self._url,
            prefix=self.prefix,
            ttl=self._ttl,
            codec=self._codec,
            client_options=self._client_options,
            allow_evicting_policy=self._allow_evicting_policy,
        )
        return handle

    # ------------------------------------------------------------------ lifecycle

    async def _open(self) -> None:
        if self._client is None:
            assert self._url is not None
            self._client = self._own_client()
        if self._cluster:
            # Read the slot map now (a no-op if the client already has it): left to the first
            # commands, a burst of concurrent ones each reinitialises the client and drops the
            # connections the others are using.
            try:
                await self._client.initialize()
            except (redis_errors.RedisError, OSError) as exc:
                raise self._unavailable("open", exc) from chainable(exc)
        self._scripts = {name: self._client.register_script(text) for name, text in _SCRIPTS.items()}

    async def _ready(self, operation: str) -> None:
        await super()._ready(operation)
        if not self._policy_checked:
            # Here rather than in _open, so a server that cannot be reached fails the operation
            # asked for, by name; a failed check is simply repeated by the next operation.
            await self._check_eviction_policy(operation)
            self._policy_checked = True

    async def _check_eviction_policy(self, operation: str) -> None:
        """Refuse a server (any node of a cluster) that may evict our keys; see docs/redis.md."""
        policies = await self._eviction_policies(operation)
        if policies is None:
            return
        for node, policy in policies.items():
            if policy.startswith("allkeys-"):
                evicts = "any key, checkpoints included,"
            elif policy in _EVICTS_KEYS_WITH_TTL and self._ttl is not None:
                evicts = "any key with a TTL, and with ttl= set every key of this storage has one,"
            else:
                continue
            raise EvictionPolicyError(
                self.describe(),
                policy,
                node,
                evicts,
                "allow_evicting_policy=True (URL option allow_evicting_policy=true)",
            )

    async def _eviction_policies(self, operation: str) -> dict[str | None, str] | None:
        """maxmemory-policy per node (None: the one server), from CONFIG GET or, where CONFIG is
        refused (managed services rename or forbid it), from INFO memory; None (logged once)
        if both are refused."""
        target: dict[str, Any] = {"target_nodes": RedisCluster.ALL_NODES} if self._cluster else {}
        refusals: list[str] = []
        for command, argument, read in (
            ("config_get", "maxmemory-policy", _config_policy),
            ("info", "memory", _info_policy),
        ):
            try:
                reply = await getattr(self._client, command)(argument, **target)
            except redis_errors.ResponseError as exc:  # unknown command, NOPERM, ...
                refusals.append(str(exc))
                continue
            except (redis_errors.RedisError, OSError) as exc:
                raise self._unavailable(operation, exc) from chainable(exc)
            return {node: read(answer) for node, answer in _by_node(reply).items()}
        _warn_unverified(self.describe(), refusals)
        return None

    async def _follow_loop(self) -> None:
        if self._injected is not None:
            return  # the caller's client: binding it to loops is the caller's business
        # Our client's connections belong to the old loop, which is usually closed: awaiting
        # their close would fail, so they are closed without waiting and a new client connects
        # on this loop.
        _close_abandoned(self._client)
        self._client = self._own_client()
        self._scripts = {name: self._client.register_script(text) for name, text in _SCRIPTS.items()}

    def _own_client(self) -> Any:
        """A new client from the URL, closed by _close_abandoned if the storage is collected
        without aclose()."""
        assert self._url is not None
        client = _client_from_url(self._url, self._client_options)
        if self._abandoned is not None:
            self._abandoned.detach()
        self._abandoned = weakref.finalize(self, _close_abandoned, client)
        return client

    async def _close(self) -> None:
        client, self._client = self._client, None
        if self._abandoned is not None:
            self._abandoned.detach()
            self._abandoned = None
        if client is not None and self._injected is None:
            try:
                await client.aclose()
            except (redis_errors.RedisError, OSError) as exc:
                raise self._unavailable("aclose", exc) from chainable(exc)

    # ------------------------------------------------------------------ writes

    async def _insert(self, record: CheckpointRecord) -> str | None:
        if self._cluster:
            return await self._insert_family((record,))
        digest = await self._run("save", "save_one", *self._save_one_call(record))
        return None if digest is None else _text(digest)

    def _save_one_call(self, record: CheckpointRecord) -> tuple[list[str], list[Any]]:
        workflow_name, checkpoint_id = record.workflow_name, record.checkpoint_id
        keys = self._keys.written_by_save(workflow_name, checkpoint_id, record.graph_signature_hash)
        args: list[Any] = [
            workflow_name,
            checkpoint_id,
            record.body,
            record.digest,
            record.graph_signature_hash,
            record.previous_checkpoint_id or "",
        ]
        return keys, args

    async def _insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        # The check runs inside the script that writes the checkpoint, in the workflow's slot, so
        # it is atomic on a cluster too. A refused cluster save may leave the location pointers
        # it claimed first; they name no record, so reads treat them as not found (as after a crash).
        fence = ["1", expected_latest_id or ""]
        if len(records) == 1 and not self._cluster:
            keys, args = self._save_one_call(records[0])
            reply = await self._run("save", "save_one", keys, [*args, *fence])
        else:
            reply = await self._save_family(records, fence)
            if isinstance(reply, str):
                # The top id is stored under another workflow, found before the script ran: read
                # this workflow's latest for the error message (nothing is written either way).
                newest = await self._call(
                    "save", self._client.zrevrange(self._keys.top(records[0].workflow_name), 0, 0)
                )
                return FenceCheck(_text(newest[0]) if newest else None, reply)
        if reply is None:
            return None
        status = _text(reply[0])
        if status == "stale":
            return FenceCheck(_optional_id(reply[1]), None)
        if status == "exists":
            return FenceCheck(_optional_id(reply[2]), _text(reply[1]))
        if status == "conflict":
            raise _nested_conflict(_text(reply[1]), records)
        return None

    async def _insert_family(self, records: Sequence[CheckpointRecord]) -> str | None:
        reply = await self._save_family(records, [])
        if reply is None or isinstance(reply, str):
            return reply
        status = _text(reply[0])
        if status == "exists":
            return _text(reply[1])
        if status == "conflict":
            raise _nested_conflict(_text(reply[1]), records)
        return None

    async def _save_family(self, records: Sequence[CheckpointRecord], fence: list[str]) -> Any:
        """The general save script's reply, or the stored digest (a str) when a cluster save
        finds the top id already stored under another workflow."""
        top = records[0]
        home = top.workflow_name
        sequences = [""] * len(records)
        if self._cluster:
            existing = await self._prepare_cluster_save(records, home, sequences)
            if existing is not None:
                return existing
        args: list[Any] = [home, len(records)]
        for record, sequence in zip(records, sequences, strict=True):
            args += [
                record.checkpoint_id,
                record.workflow_name,
                record.previous_checkpoint_id or "",
                record.graph_signature_hash,
                record.body,
                record.digest,
                record.container_id or "",
                record.position,
                sequence,
            ]
        return await self._run("save", "save", self._keys.sequence(home), [*args, *fence])

    async def _prepare_cluster_save(
        self, records: Sequence[CheckpointRecord], home: str, sequences: list[str]
    ) -> str | None:
        """The cross-slot half of a cluster save: location pointers, nested sequences and nested
        index entries, each idempotent; returns the stored digest if the top id is elsewhere."""
        for index, record in enumerate(records):
            location = self._keys.location(record.checkpoint_id)
            other = await self._run("save", "claim", location, [home, "0"])
            if other is None:
                continue
            other_home = _text(other)
            digest = await self._call(
                "save", self._client.hget(self._keys.record(other_home, record.checkpoint_id), "d")
            )
            if digest is not None:
                if index == 0:
                    return _text(digest)
                raise _nested_conflict(record.checkpoint_id, records)
            await self._run("save", "claim", location, [home, "1"])  # a stale pointer: take it over
        for index, record in enumerate(records[1:], start=1):
            sequence = int(
                await self._call("save", self._client.incr(self._keys.sequence(record.workflow_name)))
            )
            sequences[index] = str(sequence)
            nested_index = self._keys.nested(record.workflow_name)
            member = _nested_member(home, record.checkpoint_id)
            await self._call("save", self._client.zadd(nested_index, {member: sequence}, nx=True))
            if self._ttl is not None:
                await self._call("save", self._client.pexpire(nested_index, int(self._ttl_ms)))
                await self._call(
                    "save", self._client.pexpire(self._keys.sequence(record.workflow_name), int(self._ttl_ms))
                )
        return None

    async def _remove(self, checkpoint_id: CheckpointID) -> bool:
        reply = await self._at("delete", "remove", checkpoint_id, [])
        if reply is None:
            return False
        status = _text(reply[0])
        if status == "missing":
            return False
        if status == "nested":
            raise NestedCheckpointDeletionError(checkpoint_id, _text(reply[1]))
        await self._clean_up_after("delete", _pairs(reply[1]), pruned_from=None)
        return True

    async def _overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        reply = await self._at("write_raw_body", "overwrite", checkpoint_id, [body])
        return bool(reply)

    async def _prune(self, workflow_name: str, keep_last: int) -> int:
        count, removed = await self._run(
            "prune", "prune", self._keys.top(workflow_name), [workflow_name, keep_last]
        )
        await self._clean_up_after("prune", _pairs(removed), pruned_from=workflow_name)
        return int(count)

    async def _delete_workflow(self, workflow_name: str) -> int:
        count, removed, tombstones = await self._run(
            "delete_workflow", "delete_workflow", self._keys.top(workflow_name), [workflow_name]
        )
        await self._clean_up_after("delete_workflow", _pairs(removed), pruned_from=None)
        if self._cluster:
            for pruned in tombstones:
                await self._run(
                    "delete_workflow", "unlink_if", self._keys.pruned(_text(pruned)), [workflow_name]
                )
        return int(count)

    async def _clean_up_after(
        self, operation: str, removed: list[tuple[str, CheckpointID]], *, pruned_from: str | None
    ) -> None:
        """Cluster: the other slots' half of a removal (the script did it inline on plain Redis).
        A crash before this leaves pointers to nothing, which read as not found."""
        if not self._cluster or not removed:
            return
        home = removed[0][0] if pruned_from is None else pruned_from
        # The first removed record is top-level, so its workflow is the home of them all.
        for workflow_name, checkpoint_id in removed:
            await self._run(operation, "unlink_if", self._keys.location(checkpoint_id), [home])
            await self._call(
                operation,
                self._client.zrem(self._keys.nested(workflow_name), _nested_member(home, checkpoint_id)),
            )
            if pruned_from is not None:
                pruned = self._keys.pruned(checkpoint_id)
                await self._call(operation, self._client.set(pruned, pruned_from))
                if self._ttl is not None:
                    await self._call(operation, self._client.pexpire(pruned, int(self._ttl_ms)))

    # ------------------------------------------------------------------ reads

    async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
        stored = await self._load(checkpoint_id)
        return None if stored is None else stored.body

    async def _load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        # The read script returns the nested bodies with the body: a checkpoint with sub-workflow
        # checkpoints loads in one round trip, from one consistent snapshot.
        reply = await self._at("load", "read", checkpoint_id, ["body"])
        if reply is None:
            return None
        workflow_name, previous_id, signature = reply[2:5]
        entry = IndexEntry(
            _text(workflow_name), None if previous_id is None else _text(previous_id), _text(signature)
        )
        return _stored(checkpoint_id, reply[0], reply[1], entry)

    async def _nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        found: dict[CheckpointID, bytes] = {}
        for container_id in checkpoint_ids:
            flat = await self._at("load", "read", container_id, ["nested"])
            found.update(_body_pairs(flat or []))
        return found

    async def _latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        index = (
            self._keys.top(workflow_name)
            if graph_signature_hash is None
            else self._keys.signature(workflow_name, graph_signature_hash)
        )
        reply = await self._run("get_latest", "latest", index, [workflow_name])
        if reply is None:
            return None
        if len(reply) == 1:
            raise self._lost("get_latest", workflow_name, graph_signature_hash, _text(reply[0]), 1)
        return _stored(_text(reply[0]), reply[1], reply[2])

    async def _list(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        rows = await self._ordered(
            "list_checkpoints", workflow_name, graph_signature_hash, include_nested, True
        )
        return [StoredBody(checkpoint_id, body) for _, checkpoint_id, body in rows if body is not None]

    async def _list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        rows = await self._ordered(
            "list_checkpoint_ids", workflow_name, graph_signature_hash, include_nested, False
        )
        return [checkpoint_id for _, checkpoint_id, _ in rows]

    async def _ordered(
        self,
        operation: str,
        workflow_name: str,
        signature: str | None,
        include_nested: bool,
        with_bodies: bool,
    ) -> list[tuple[float, CheckpointID, bytes | None]]:
        """(sequence, id, body) of the workflow's records in sequence order, read page by page."""
        index = (
            self._keys.top(workflow_name)
            if signature is None
            else self._keys.signature(workflow_name, signature)
        )
        rows: list[tuple[float, CheckpointID, bytes | None]] = []
        gone: list[tuple[float, CheckpointID]] = []
        after = "-inf"
        while True:
            flat, last, flat_gone = await self._run(
                operation, "page", index, [workflow_name, after, PAGE_SIZE, "1" if with_bodies else "0"]
            )
            for position in range(0, len(flat), 3):
                body = flat[position + 2]
                rows.append(
                    (float(flat[position + 1]), _text(flat[position]), None if body is None else bytes(body))
                )
            for position in range(0, len(flat_gone), 2):
                gone.append((float(flat_gone[position + 1]), _text(flat_gone[position])))
            if last is None:
                break
            after = _text(last)
        if gone:
            # With a TTL, records expire oldest first, so entries older than every record still
            # stored are expired ones; any other entry without its record is a lost checkpoint.
            oldest_stored = rows[0][0] if rows else float("inf")
            lost = gone if self._ttl is None else [entry for entry in gone if entry[0] > oldest_stored]
            if lost:
                raise self._lost(operation, workflow_name, signature, lost[0][1], len(lost))
        if not include_nested:
            return rows
        members = await self._call(
            operation, self._client.zrange(self._keys.nested(workflow_name), 0, -1, withscores=True)
        )
        by_home: dict[str, list[tuple[CheckpointID, float]]] = {}
        for member, score in members:
            home, checkpoint_id = _split_member(_text(member))
            by_home.setdefault(home, []).append((checkpoint_id, float(score)))
        for home, entries in by_home.items():
            replies = await self._fetch(
                operation, home, [checkpoint_id for checkpoint_id, _ in entries], "body"
            )
            for (checkpoint_id, score), reply in zip(entries, replies, strict=True):
                if reply is None:
                    continue  # a pointer to a record that expired or was never completed
                body, record_signature = bytes(reply[0]), _text(reply[1])
                if signature is None or record_signature == signature:
                    rows.append((score, checkpoint_id, body if with_bodies else None))
        rows.sort(key=lambda row: row[0])
        return rows

    async def _fetch(
        self, operation: str, home: str, checkpoint_ids: list[CheckpointID], what: str
    ) -> list[Any]:
        replies: list[Any] = []
        for start in range(0, len(checkpoint_ids), PAGE_SIZE):
            chunk = checkpoint_ids[start : start + PAGE_SIZE]
            replies += await self._run(operation, "fetch", self._keys.top(home), [home, what, *chunk])
        return replies

    async def _walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        operation = "walk_ancestry" if with_bodies else "walk_ancestry_ids"
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        start: CheckpointID | None = checkpoint_id
        while start is not None and len(links) < max_depth:
            reply = await self._at(
                operation, "walk", start, [max_depth - len(links), "1" if with_bodies else "0"]
            )
            if reply is None:  # cluster: no pointer for this id
                if await self._call(operation, self._client.exists(self._keys.pruned(start))):
                    tombstones.add(start)
                break
            flat_links, flat_bodies, flat_tombstones, unresolved = reply
            if not flat_links and _optional_text(unresolved) == start:
                # Cluster: a pointer whose record is gone (expired, or a save that never completed).
                if await self._call(operation, self._client.exists(self._keys.pruned(start))):
                    tombstones.add(start)
                break
            for position in range(0, len(flat_links), 2):
                links[_text(flat_links[position])] = _optional_text(flat_links[position + 1])
            bodies.update(_body_pairs(flat_bodies))
            tombstones.update(_text(item) for item in flat_tombstones)
            # On a cluster the chain may continue in another workflow's slot: one more call there.
            start = _optional_text(unresolved)
            if start is not None and start in links:
                break
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def _nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        reply = await self._at("list_nested", "read", checkpoint_id, ["children"])
        if reply is None:
            return None
        return [_text(child) for child in reply[0]]

    async def _workflow_names(self) -> list[str]:
        return await self._scan_workflows("list_workflows", "top")

    async def _info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        reply = await self._at("checkpoint_info", "read", checkpoint_id, ["info"])
        return None if reply is None else _info_from(checkpoint_id, reply)

    async def _records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        if workflow_name is not None:
            names = [workflow_name]
        else:
            names = sorted(
                set(await self._scan_workflows("list_records", "top"))
                | set(await self._scan_workflows("list_records", "nested"))
            )
        infos: list[CheckpointInfo] = []
        for name in names:
            by_home: dict[str, list[CheckpointID]] = {
                name: [
                    _text(i)
                    for i in await self._call(
                        "list_records", self._client.zrange(self._keys.top(name), 0, -1)
                    )
                ]
            }
            for member in await self._call(
                "list_records", self._client.zrange(self._keys.nested(name), 0, -1)
            ):
                home, checkpoint_id = _split_member(_text(member))
                by_home.setdefault(home, []).append(checkpoint_id)
            for home, ids in by_home.items():
                replies = await self._fetch("list_records", home, ids, "info")
                infos += [
                    _info_from(i, reply) for i, reply in zip(ids, replies, strict=True) if reply is not None
                ]
        return infos

    async def _tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        names = (
            [workflow_name]
            if workflow_name is not None
            else await self._scan_workflows("list_tombstones", "tombs")
        )
        found: set[CheckpointID] = set()
        for name in names:
            members = await self._call("list_tombstones", self._client.smembers(self._keys.tombstones(name)))
            found.update(_text(member) for member in members)
        return found

    # ------------------------------------------------------------------ machinery

    async def _scan_workflows(self, operation: str, kind: str) -> list[str]:
        names: set[str] = set()

        async def scan() -> None:
            async for key in self._client.scan_iter(match=self._keys.pattern(kind), count=1000):
                names.add(self._keys.workflow_of(_text(key), kind))

        await self._call(operation, scan())
        return sorted(names)

    async def _at(self, operation: str, script: str, checkpoint_id: CheckpointID, args: list[Any]) -> Any:
        """Run an id-addressed script where the record lives: on plain Redis the script finds the
        home itself (one round trip); on a cluster the pointer is read first. None if no home."""
        if not self._cluster:
            return await self._run(
                operation, script, self._keys.location(checkpoint_id), [checkpoint_id, "", *args]
            )
        home = await self._call(operation, self._client.get(self._keys.location(checkpoint_id)))
        if home is None:
            return None
        home_name = _text(home)
        return await self._run(
            operation, script, self._keys.record(home_name, checkpoint_id), [checkpoint_id, home_name, *args]
        )

    async def _run(self, operation: str, script: str, key: str | list[str], args: Sequence[Any]) -> Any:
        """One script call: KEYS[1] routes it to its slot; the common arguments go first."""
        keys = [key] if isinstance(key, str) else key
        common = [self._keys.prefix, "0" if self._cluster else "1", self._ttl_ms]
        return await self._call(operation, self._scripts[script](keys=keys, args=[*common, *args]))

    async def _call(self, operation: str, request: Awaitable[Any]) -> Any:
        try:
            return await request
        except (redis_errors.RedisError, OSError) as exc:
            raise self._unavailable(operation, exc) from chainable(exc)
        except RuntimeError as exc:
            if self._injected is None or "loop" not in str(exc):
                raise
            # Our own client follows the loop (_follow_loop); the caller's stays on its first one.
            raise StorageUnavailableError(
                operation,
                f"{self.describe()}: the Redis client given to this storage is bound to an event "
                f"loop that has ended ({exc}); a redis-py client belongs to the loop it connected "
                "on: create the client and the storage on the running loop, or give the storage "
                "url= so it makes its own client on each loop",
            ) from exc

    def _lost(
        self,
        operation: str,
        workflow_name: str,
        signature: str | None,
        checkpoint_id: CheckpointID,
        count: int,
    ) -> CheckpointCorruptedError:
        """A checkpoint the index lists whose record is gone: evicted, or deleted behind our back.
        Reads report it rather than skip it, and never answer with an older checkpoint instead."""
        index = f"workflow {workflow_name!r}" + (
            "" if signature is None else f" (graph signature {signature!r})"
        )
        others = "" if count == 1 else f" ({count - 1} more index entries have lost their records too)"
        instead = "fall back to an older checkpoint" if operation == "get_latest" else "skip lost checkpoints"
        return CheckpointCorruptedError(
            checkpoint_id,
            f"{index} lists it, but its record is gone from the server{others}: evicted by its "
            f"maxmemory-policy, or deleted outside this storage; {operation} does not {instead}",
        )

    def _unavailable(self, operation: str, exc: BaseException) -> StorageUnavailableError:
        return StorageUnavailableError(operation, f"{self.describe()}: {type(exc).__name__}: {exc}")


# ---------------------------------------------------------------------- helpers


def _close_abandoned(client: Any) -> None:
    """Close a client of ours that nobody will ``aclose()``: its storage was collected, or it
    was left on an event loop that ended. Awaiting is not possible (the loop may be closed, or
    about to be), so its sockets are closed without waiting, and a cluster client is marked
    closed, so that neither reports itself "unclosed" from a running loop when collected."""
    with contextlib.suppress(Exception):  # best effort: nobody is left to tell
        if isinstance(client, RedisCluster):
            nodes = [*client.get_nodes(), *client.nodes_manager.startup_nodes.values()]
            connections = [connection for node in nodes for connection in node._connections]
            client._initialize = True  # what aclose() sets first
        else:
            pool = client.connection_pool
            connections = [*pool._available_connections, *pool._in_use_connections]
        for connection in connections:
            try:
                connection._close()  # type: ignore[no-untyped-call]
            except RuntimeError:
                # Its loop is closed: forget the streams; collecting the transport closes the socket.
                connection._reader = connection._writer = None


def _pairs(flat: Sequence[Any]) -> list[tuple[str, CheckpointID]]:
    return [(_text(flat[i]), _text(flat[i + 1])) for i in range(0, len(flat), 2)]


def _stored(
    checkpoint_id: CheckpointID, body: Any, flat_nested: Sequence[Any], entry: IndexEntry | None = None
) -> StoredBody:
    """A body read with the nested bodies that came back beside it; with none, the base asks
    ``_nested_bodies`` if the body turns out to need any."""
    nested = _body_pairs(flat_nested) if flat_nested else None
    return StoredBody(checkpoint_id, bytes(body), nested, entry)


def _body_pairs(flat: Sequence[Any]) -> dict[CheckpointID, bytes]:
    return {_text(flat[i]): bytes(flat[i + 1]) for i in range(0, len(flat), 2)}


def _info_from(checkpoint_id: CheckpointID, reply: Sequence[Any]) -> CheckpointInfo:
    workflow_name, previous, signature, container, sequence, size = reply
    return CheckpointInfo(
        checkpoint_id=checkpoint_id,
        workflow_name=_text(workflow_name),
        previous_checkpoint_id=_optional_text(previous),
        graph_signature_hash=_text(signature),
        container_id=_optional_text(container),
        sequence=int(sequence),
        size=int(size),
    )


def _nested_conflict(
    checkpoint_id: CheckpointID, records: Sequence[CheckpointRecord]
) -> CheckpointConflictError:
    container = next((r.container_id for r in records if r.checkpoint_id == checkpoint_id), None)
    return CheckpointConflictError(
        checkpoint_id,
        f"embedded in checkpoint {container!r}, but a record with this id is already stored; "
        "an embedded checkpoint needs an id of its own",
    )


def _check_client(client: object) -> None:
    if not isinstance(client, (Redis, RedisCluster)):
        raise StorageConfigurationError(
            f"client must be a redis.asyncio.Redis or RedisCluster, not {type(client).__name__}"
        )
    kwargs = client.get_connection_kwargs()
    if kwargs.get("decode_responses"):
        raise StorageConfigurationError(
            "the Redis client decodes responses to str; checkpoint bodies are bytes: "
            "build it with decode_responses=False"
        )


_OUR_OPTIONS = ("prefix", "ttl", "cluster", "allow_evicting_policy")
_DRIVER_OPTIONS = tuple(
    # redis-py's own URL options. "timeout" is BlockingConnectionPool's and would reach the
    # connection as an unknown argument; the wait for a free connection is wait_seconds here.
    name
    # redis-py also reads username and password from the query, as from the userinfo.
    for name in (
        *URL_QUERY_ARGUMENT_PARSERS,
        "client_name",
        "lib_name",
        "lib_version",
        "username",
        "password",
    )
    if name != "timeout" and not name.startswith("ssl_")
)
_TLS_OPTIONS = tuple(
    name
    for name in (
        *URL_QUERY_ARGUMENT_PARSERS,
        *("ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_ca_path"),
        *("ssl_ciphers", "ssl_password"),
    )
    if name.startswith("ssl_")
)
_POOL_OPTIONS = ("wait_seconds",)
"""Options of WaitingConnectionPool, which only a single-server storage uses."""


def url_option_names(url: str) -> tuple[str, ...]:
    """The query options a Redis URL of this kind takes: ours, redis-py's, TLS ones for rediss://,
    the pool's for a single server (a cluster client builds its own pools)."""
    names = (*_OUR_OPTIONS, *_DRIVER_OPTIONS)
    if urlsplit(url).scheme.lower() == "rediss":
        names += _TLS_OPTIONS
    if not _url_is_cluster(url):
        names += _POOL_OPTIONS
    return names


def url_options(url: str) -> dict[str, str]:
    """A Redis URL's query options, refusing names no part of the stack takes and values
    redis-py cannot parse, so both fail when the storage is built, not at its first command."""
    options = urls.parse_url_options(url, urlsplit(url).query, url_option_names(url), what="Redis")
    try:
        parse_url(_driver_url(url))
    except ValueError as exc:
        raise StorageConfigurationError(f"Redis URL {redact_url(url)!r}: {exc}") from None
    return options


def _driver_url(url: str) -> str:
    """``url`` without the query options redis-py does not know (ours and the common ones)."""
    parts = urlsplit(url)
    query = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if k not in _OUR_OPTIONS and k not in urls.COMMON_URL_OPTIONS
    ]
    return urlunsplit(parts._replace(query=urlencode(query)))


def _url_is_cluster(url: str | None) -> bool:
    return _url_flag(url, "cluster")


def _url_flag(url: str | None, name: str) -> bool:
    options = dict(parse_qsl(urlsplit(url or "").query, keep_blank_values=True))
    value = options.get(name, "").lower()
    if value not in ("", "0", "1", "true", "false", "yes", "no"):
        raise StorageConfigurationError(f"Redis URL {url!r}: {name} must be true or false, got {value!r}")
    return value in ("1", "true", "yes")


def _by_node(reply: Any) -> Mapping[str | None, Any]:
    """A cluster client answers a command sent to several nodes with {node name: reply}, and
    one sent to a single node (a one-node cluster) with the reply itself, as a plain client does."""
    if isinstance(reply, Mapping) and reply and all(isinstance(value, Mapping) for value in reply.values()):
        return {_text(node): answer for node, answer in reply.items()}
    return {None: reply}


def _config_policy(reply: Mapping[Any, Any]) -> str:
    return next((_text(value) for key, value in reply.items() if _text(key) == "maxmemory-policy"), "")


def _info_policy(reply: Mapping[Any, Any]) -> str:
    return _text(reply.get("maxmemory_policy", ""))


_unverified_servers: set[str] = set()
"""Servers already warned about (once per process each): their eviction policy is unknown."""


def _warn_unverified(server: str, refusals: Sequence[str]) -> None:
    if server in _unverified_servers:
        return
    _unverified_servers.add(server)
    _logger.warning(
        "%s: could not read the server's maxmemory-policy (%s); if it is an allkeys-* policy the "
        "server may evict checkpoints silently. Check it with the server's operator (docs/redis.md), "
        "or pass allow_evicting_policy=True to skip this check",
        server,
        redact_text("; ".join(refusals)),
    )


def _client_from_url(url: str, options: Mapping[str, Any]) -> Any:
    """A client for ``url`` without our own query options, retrying connection errors and
    timeouts with exponential backoff."""
    redis_url = _driver_url(url)
    settings: dict[str, Any] = {
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.02), RETRIES),
        "retry_on_error": [redis_errors.ConnectionError, redis_errors.TimeoutError],
        **options,
        "decode_responses": False,
    }
    try:
        if _url_is_cluster(url):
            return RedisCluster.from_url(redis_url, **settings)
        settings.setdefault("max_connections", MAX_CONNECTIONS)
        settings.setdefault("wait_seconds", CONNECTION_WAIT_SECONDS)
        return Redis.from_pool(WaitingConnectionPool.from_url(redis_url, **settings))
    except (ValueError, redis_errors.RedisError) as exc:
        raise StorageConfigurationError(f"invalid Redis URL {url!r}: {exc}") from chainable(exc)


class WaitingConnectionPool(ConnectionPool):
    """A bounded pool where a burst of concurrent operations waits for a free connection (up to
    ``wait_seconds``) instead of failing, as redis-py's ``BlockingConnectionPool`` does, but
    takes a free connection without its condition variable and timer: a save's one round trip
    should not pay for a wait that did not happen."""

    def __init__(self, *, wait_seconds: float | str | None = CONNECTION_WAIT_SECONDS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # From a URL's query (``?wait_seconds=5``) the value arrives as text.
        self.wait_seconds = None if wait_seconds is None else float(wait_seconds)
        if self.wait_seconds is not None and not self.wait_seconds >= 0:
            raise ValueError(f"wait_seconds must be a number of seconds >= 0, got {wait_seconds!r}")
        self._free = asyncio.Semaphore(self.max_connections)
        self._handed_out: set[Any] = set()

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if self._free.locked():
            try:
                await asyncio.wait_for(self._free.acquire(), self.wait_seconds)
            except asyncio.TimeoutError:
                raise redis_errors.ConnectionError(
                    f"no free connection after {self.wait_seconds} s ({self.max_connections} in use)"
                ) from None
        else:
            await self._free.acquire()
        try:
            connection = await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except BaseException:
            # A connection the base class could not prepare went back through release(), which
            # frees a slot only for connections handed out; this one was not.
            self._free.release()
            raise
        self._handed_out.add(connection)
        return connection

    async def release(self, connection: Any) -> None:
        try:
            await super().release(connection)
        finally:
            if connection in self._handed_out:
                self._handed_out.discard(connection)
                self._free.release()


async def delete_prefix(client: Any, prefix: str) -> int:
    """Delete every key of the storage with this prefix, found with SCAN (never FLUSHALL); for
    tests and tooling. Keys of a longer prefix (``prefix:more``) are left alone."""
    pattern = _GLOB_SPECIAL.sub(r"\\\1", prefix) + ":{*"
    deleted = 0
    async for key in client.scan_iter(match=pattern, count=1000):
        deleted += int(await client.delete(key))
    return deleted


__all__ = [
    "DEFAULT_PREFIX",
    "RedisCheckpointStorage",
    "RedisKeys",
    "WaitingConnectionPool",
    "delete_prefix",
    "escape",
    "script_sha",
    "unescape",
]
