"""The Redis backend: the primitives (storages/backend.py) wired onto the connection, the commit
protocol and the reads (see docs/redis.md for the key layout and what each operation costs)."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Self

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from ..backend import Backend, CheckpointRecord, FenceCheck, InsertResult, Leftover, StoredBody, WalkRecords
from ..contract import Capability, CheckpointID, CheckpointInfo
from ..errors import StorageConfigurationError
from . import leftovers
from .client import RedisConnection
from .cluster import ClusterSlotSpan
from .commit import Commits, SlotSpan
from .config import DEFAULT_PREFIX, checked_settings
from .keys import RedisKeys
from .loads import Loads
from .reads import Reads

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


class RedisBackend(Backend):
    """Checkpoints on a Redis server or cluster, under a key prefix.

    Give either ``client`` (a ``redis.asyncio.Redis`` or ``RedisCluster`` you own and close; it
    must not decode responses) or ``url`` (the backend builds and closes its own client; every
    :meth:`new_handle` gets its own connection pool). ``ttl`` in seconds makes checkpoints expire.

    On opening, the backend reads the server's ``maxmemory-policy`` (every node's, on a cluster)
    and refuses one that may evict its keys (``allkeys-*``; with ``ttl``, under which every key
    has a TTL, also ``volatile-lru``, ``-lfu`` and ``-random``) with
    :class:`~storages.errors.EvictionPolicyError`: such a server loses checkpoints silently.
    ``allow_evicting_policy=True`` skips the check, for those who accept the risk (or know the
    server cannot evict, as an in-process fake).
    """

    capabilities: frozenset[Capability] = _BASE_CAPABILITIES

    def __init__(
        self,
        client: Redis | RedisCluster | None = None,
        *,
        url: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        ttl: float | None = None,
        client_options: Mapping[str, Any] | None = None,
        allow_evicting_policy: bool = False,
        read_only: bool = False,
    ) -> None:
        if (client is None) == (url is None):
            raise StorageConfigurationError("RedisCheckpointStorage needs exactly one of client= or url=")
        settings = checked_settings(prefix, ttl, allow_evicting_policy)
        self._settings = settings
        self._given_client = client
        self._client_options = dict(client_options or {})
        self._connection = RedisConnection(settings, client, url, self._client_options)
        if not isinstance(read_only, bool):
            raise StorageConfigurationError(f"read_only must be True or False, got {read_only!r}")
        self._read_only = read_only
        # Eviction can only lose what a handle writes: one that only reads has nothing to check.
        self._policy_checked = allow_evicting_policy or read_only
        span: SlotSpan | ClusterSlotSpan = (
            ClusterSlotSpan(self._connection) if self._connection.cluster else SlotSpan(self._connection)
        )
        self._span = span
        self._commits = Commits(self._connection, span)
        self._reads = Reads(self._connection, span)
        self._loads = Loads(self._connection, span)
        self.ttl = settings.ttl
        if ttl is not None:
            # An instance attribute: TTL is a per-storage setting, so is its capability.
            self.capabilities = _BASE_CAPABILITIES | {Capability.TTL}

    def new_handle(self, *, read_only: bool | None = None) -> Self:
        """A backend on the same prefix: the given client again (its owner's), or a client of its
        own from the URL (``read_only``: one that only reads; by default, as this one)."""
        return type(self)(
            self._given_client,
            url=self._connection.url,
            prefix=self.prefix,
            ttl=self.ttl,
            client_options=self._client_options,
            allow_evicting_policy=self.allow_evicting_policy,
            read_only=self._read_only if read_only is None else read_only,
        )

    @property
    def read_only(self) -> bool:
        """The backend only reads: every write raises, and the eviction policy (which can only
        lose what is written) is not checked."""
        return self._read_only

    def _refuse_if_read_only(self, operation: str) -> None:
        if self._read_only:
            raise StorageConfigurationError(
                f"{self.describe()} was opened read-only: {operation} would write; open it without "
                "read_only to write"
            )

    @property
    def prefix(self) -> str:
        return self._settings.prefix

    @property
    def allow_evicting_policy(self) -> bool:
        """Whether the eviction-policy check is skipped (see docs/redis.md)."""
        return self._settings.allow_evicting_policy

    @property
    def cluster(self) -> bool:
        return self._connection.cluster

    @property
    def keys(self) -> RedisKeys:
        return self._connection.keys

    @property
    def client(self) -> Any:
        """The redis-py client in use (None before open and after close). A test hook
        (docs/redis.md)."""
        return self._connection.client

    @property
    def scripts(self) -> dict[str, Any]:
        """Script name -> redis-py Script, as registered on the client in use. A test hook
        (docs/redis.md)."""
        return self._connection.scripts

    @property
    def connection(self) -> RedisConnection:
        """The handle's connection (client, scripts, error translation). A test hook."""
        return self._connection

    @property
    def commits(self) -> Commits:
        """The commit protocol (its one-record and general saves). A test hook."""
        return self._commits

    @property
    def reads(self) -> Reads:
        """The reads other than load. A test hook."""
        return self._reads

    @property
    def loads(self) -> Loads:
        """``load`` and its per-handle cache of where records live. A test hook."""
        return self._loads

    @property
    def span(self) -> SlotSpan | ClusterSlotSpan:
        """How a save finds the slots its keys live in (one node, or a cluster). A test hook."""
        return self._span

    def describe(self) -> str:
        return self._connection.describe()

    # ------------------------------------------------------------------ lifecycle

    async def open(self, operation: str) -> None:
        """Connect (building the client from the URL) and check the eviction policy once.

        A failed open (a refused policy, an unreachable cluster) closes the client it built: the
        engine then counts the backend as never opened, so neither ``aclose()`` nor a collected
        storage would close it, and the next operation opens again with a client of its own.
        A given client is the caller's and stays as it is."""
        try:
            await self._connection.open(self)
            if not self._policy_checked:
                await self._connection.check_eviction_policy(operation)
                self._policy_checked = True
        except BaseException:
            if self._connection.injected is None:
                # The open's own error is the one to report, not a failure to close after it.
                with contextlib.suppress(Exception):
                    await self._connection.close()
            raise

    async def follow_loop(self) -> None:
        await self._connection.follow_loop(self)

    async def close(self) -> None:
        await self._connection.close()

    # ------------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        self._refuse_if_read_only("save")
        stored = await self._commits.insert(records)
        if stored is None:
            self._remember_family(records)
        return InsertResult.of_stored_digest(stored, records[0])

    def _remember_family(self, records: Sequence[CheckpointRecord]) -> None:
        # Every record of a family lives in the home of its top-level record. Records with
        # others nested in them are left to the load script, which reads their bodies too.
        loads, home = self._loads, records[0].workflow_name
        containers = {record.container_id for record in records} if len(records) > 1 else ()
        for record in records:
            loads.note_body(len(record.body))
            if record.checkpoint_id not in containers:
                loads.remember(record.checkpoint_id, home)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        self._refuse_if_read_only("save")
        refused = await self._commits.insert_fenced(records, expected_latest_id)
        if refused is None:
            self._remember_family(records)
        return refused

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        self._refuse_if_read_only("delete")
        self._loads.forget(checkpoint_id)
        return await self._commits.remove(checkpoint_id)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        self._refuse_if_read_only("write_raw_body")
        return await self._commits.overwrite_body(checkpoint_id, body)

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        self._refuse_if_read_only("prune")
        return await self._commits.prune(workflow_name, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        self._refuse_if_read_only("delete_workflow")
        return await self._commits.delete_workflow(workflow_name)

    # ------------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self._loads.load(checkpoint_id)

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return await self._reads.nested_bodies(checkpoint_ids)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self._reads.latest(workflow_name, graph_signature_hash)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self._reads.list_bodies(workflow_name, graph_signature_hash, include_nested)

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return await self._reads.list_ids(workflow_name, graph_signature_hash, include_nested)

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self._reads.walk(checkpoint_id, max_depth, with_bodies=with_bodies)

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self._reads.nested_ids(checkpoint_id)

    async def workflow_names(self) -> list[str]:
        return await self._span.index.names("list_workflows", ("top",))

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self._reads.info(checkpoint_id)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return await self._reads.records(workflow_name)

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return await self._reads.tombstones(workflow_name)

    async def leftovers(self, workflow_name: str | None) -> Sequence[Leftover]:
        return await leftovers.find(self, workflow_name)

    async def repair_leftover(self, leftover: Leftover) -> str | None:
        return await leftovers.repair(self, leftover)
