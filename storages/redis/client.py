"""The connection of one storage handle: its redis-py client (built from a URL or given), the
event loop it follows, script calls, driver-error translation and the eviction-policy check."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import weakref
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import parse_url

from ..errors import (
    CheckpointCorruptedError,
    EvictionPolicyError,
    StorageConfigurationError,
    StorageUnavailableError,
)
from ..redaction import chainable, redact_text
from .cancellation import ends_cancelled
from .config import (
    RedisSettings,
    describe_url,
    driver_url,
    url_is_cluster,
)
from .driver import OwnClient, check_client, client_from_url
from .keys import RedisKeys
from .replies import text
from .scripts import SCRIPTS, ScriptCall, script_sha

_logger = logging.getLogger("storages.redis")

_EVICTS_KEYS_WITH_TTL = frozenset({"volatile-lru", "volatile-lfu", "volatile-random"})
"""Policies that evict keys with a TTL in any order. ``volatile-ttl`` evicts the soonest to
expire first, which for this storage's keys is early expiry in save order, as TTL itself does."""


class RedisConnection:
    """A handle's client and scripts. Given a client, it uses it as it is (the caller owns and
    closes it); given a URL, it builds its own on open, and a new one on each new event loop."""

    def __init__(
        self,
        settings: RedisSettings,
        client: Redis | RedisCluster | None,
        url: str | None,
        client_options: Mapping[str, Any],
    ) -> None:
        if client is not None:
            check_client(client)
        self.settings = settings
        self.keys = RedisKeys(settings.prefix)
        self.injected = client
        self.url = url
        self.client_options = dict(client_options)
        self.client: Any = client
        self.cluster = isinstance(client, RedisCluster) if client is not None else url_is_cluster(url)
        self.scripts: dict[str, Any] = {}
        """Script name -> :class:`Script` on the client in use; refilled in place when it changes."""
        self._common = [settings.prefix.encode(), b"0" if self.cluster else b"1", settings.ttl_ms.encode()]
        self._own: OwnClient | None = None
        self._abandoned: weakref.finalize[Any, Any] | None = None

    def describe(self) -> str:
        if self.url is not None:
            return describe_url(self.url, self.settings.prefix)
        kind = "redis cluster" if self.cluster else "redis"
        return f"{kind} client (prefix {self.settings.prefix!r})"

    # ------------------------------------------------------------------ lifecycle

    async def open(self, owner: object) -> None:
        if self.client is None:
            await self._own_client(owner)
        if self.cluster:
            # Read the slot map now (a no-op if the client already has it): left to the first
            # commands, a burst of concurrent ones each reinitialises the client and drops the
            # connections the others are using.
            try:
                await self.client.initialize()
            except (redis_errors.RedisError, OSError) as exc:
                raise self.unavailable("open", exc) from chainable(exc)
        self._register_scripts()

    async def follow_loop(self, owner: object) -> None:
        if self.injected is not None:
            return  # the caller's client: binding it to loops is the caller's business
        # Our client's connections belong to the old loop, which usually ended and closed them
        # (OwnClient): awaiting anything of theirs here would fail, so the client is abandoned
        # (closed on its loop if that still runs) and a new one connects on this loop.
        if self._own is not None:
            self._own.abandon()
        await self._own_client(owner)
        self._register_scripts()

    async def _own_client(self, owner: object) -> None:
        """A new client from the URL, closed when its loop ends, or abandoned if ``owner`` (the
        storage) is collected without aclose()."""
        assert self.url is not None
        self.client = client_from_url(self.url, self.client_options)
        self._own = OwnClient(self.client)
        await self._own.bind()
        if self._abandoned is not None:
            self._abandoned.detach()
        self._abandoned = weakref.finalize(owner, self._own.abandon)

    def _register_scripts(self) -> None:
        self.scripts.clear()
        self.scripts.update({name: Script(self.client, name) for name in SCRIPTS})

    async def close(self) -> None:
        self.client = None
        own, self._own = self._own, None
        if self._abandoned is not None:
            self._abandoned.detach()
            self._abandoned = None
        if own is not None:  # a given client is the caller's to close
            try:
                await own.close()
            except (redis_errors.RedisError, OSError) as exc:
                raise self.unavailable("aclose", exc) from chainable(exc)

    # ------------------------------------------------------------------ calls

    async def run(self, operation: str, call: ScriptCall) -> Any:
        """One script call; its first key routes it to its slot."""
        keys, args = call.encode()
        return await self.call(operation, self.scripts[call.script](keys=keys, args=[*self._common, *args]))

    @property
    def transactions(self) -> bool:
        """Whether :meth:`transaction` can be had: a pooled plain client (not a cluster, not a
        client pinned to one connection)."""
        client = self.client
        return not self.cluster and type(client) is Redis and client.connection is None

    async def run_staged(self, operation: str, call: ScriptCall, stage: str, body: bytes) -> Any:
        """``call`` (which names ``stage``) after ``body`` is written to ``stage``, in one
        transaction: the script's reply, or NOT_RUN when the transaction could not be had or a
        command in it was refused. Then nothing may have run, or the body only (the stage's TTL
        removes it; it is also deleted here when the server can be reached), or everything
        (EXEC ran but its reply was lost): the caller saves again the plain way, which an
        already stored id answers with its digest."""
        script = self.scripts[call.script]
        keys, args = call.encode()
        reply = await self.transaction(
            operation,
            (
                ("HSET", stage, "b", body),
                ("PEXPIRE", stage, STAGE_TTL_MS),
                ("EVALSHA", script.sha, str(len(keys)), *keys, *self._common, *args),
            ),
        )
        if reply is None or len(reply) != 3:
            with contextlib.suppress(redis_errors.RedisError, OSError):
                await ends_cancelled(self.client.delete(stage))
            return NOT_RUN
        return reply[2]

    async def transaction(
        self, operation: str, commands: Sequence[tuple[str | bytes, ...]]
    ) -> list[Any] | None:
        """EXEC's reply to ``MULTI``, ``commands``, ``EXEC`` sent at once on one pooled connection
        (plain Redis): one round trip, atomic. None when it could not be had, and the caller reads
        another way: the client is not a pooled plain one, the connection failed (it is dropped),
        or a command was refused.

        redis-py's transaction pipeline cost the client about 430,000 more instructions per call
        than a script (its command stack, callbacks and checks), more than the 70,000 the server
        saves: so the commands go as one write packed here, and the five replies are read under
        one timeout (the connection's socket timeout) rather than one timer each. Like every
        request, it ends cancelled when the calling task was cancelled while it ran.
        """
        if not self.transactions:
            return None
        return await ends_cancelled(self._transaction(operation, commands))

    async def _transaction(
        self, operation: str, commands: Sequence[tuple[str | bytes, ...]]
    ) -> list[Any] | None:
        pool: Any = self.client.connection_pool
        try:
            connection = await pool.get_connection()
        except (redis_errors.RedisError, OSError) as exc:
            raise self.unavailable(operation, exc) from chainable(exc)
        try:
            try:
                await connection.send_packed_command(_packed(("MULTI",), *commands, ("EXEC",)))
                async with asyncio.timeout(connection.socket_timeout):
                    for _ in range(len(commands) + 1):
                        await connection.read_response(timeout=math.inf)  # OK, then QUEUED each
                    reply = await connection.read_response(timeout=math.inf)
            except BaseException as exc:
                # Replies may be left unread on it: the connection is not used again.
                await connection.disconnect()
                if isinstance(exc, redis_errors.RedisError | OSError | asyncio.TimeoutError):
                    return None
                raise
        finally:
            await pool.release(connection)
        if not isinstance(reply, list) or any(isinstance(item, Exception) for item in reply):
            return None
        return reply

    async def call(self, operation: str, request: Awaitable[Any]) -> Any:
        """Await one driver request, translating driver errors into StorageUnavailableError, or
        CheckpointCorruptedError where the store itself is damaged (see :meth:`damaged`); a
        request during which the calling task was cancelled ends cancelled (cancellation.py)."""
        try:
            return await ends_cancelled(request)
        except redis_errors.ResponseError as exc:
            raise (
                self.damaged(operation, exc)
                or self.not_permitted(operation, exc)
                or self.unavailable(operation, exc)
            ) from chainable(exc)
        except (redis_errors.RedisError, OSError) as exc:
            raise self.unavailable(operation, exc) from chainable(exc)
        except RuntimeError as exc:
            if self.injected is None or "loop" not in str(exc):
                raise
            # Our own client follows the loop (follow_loop); the caller's stays on its first one.
            raise StorageUnavailableError(
                operation,
                f"{self.describe()}: the Redis client given to this storage is bound to an event "
                f"loop that has ended ({exc}); a redis-py client belongs to the loop it connected "
                "on: create the client and the storage on the running loop, or give the storage "
                "url= so it makes its own client on each loop",
            ) from exc

    def damaged(self, operation: str, exc: BaseException) -> CheckpointCorruptedError | None:
        """A WRONGTYPE reply means one of this storage's keys holds a kind of value no save writes
        (a string where an index is, say): the store is damaged or was written by something else,
        which retrying cannot mend, so it is corruption, not unavailability. Redis names no key in
        that reply; the error names the operation that met it."""
        if "WRONGTYPE" not in str(exc):
            return None
        return CheckpointCorruptedError(
            f"<{operation}>",
            f"{self.describe()}: a key of this storage holds another kind of value than this "
            f"storage writes there (a damaged or hostile store); Redis said: {redact_text(str(exc))[:200]}",
        )

    def not_permitted(self, operation: str, exc: BaseException) -> StorageConfigurationError | None:
        """A NOPERM reply: the server's ACL does not let this user touch this prefix's keys (or
        run a command the storage needs). Retrying cannot help; the user or the prefix is wrong."""
        if not isinstance(exc, redis_errors.NoPermissionError) and "NOPERM" not in str(exc):
            return None
        return StorageConfigurationError(
            f"{self.describe()}: the server refused {operation} to this user (ACL): "
            f"{redact_text(str(exc))[:200]}; the user needs read and write access to every key of the "
            f"prefix (key pattern ~{self.settings.prefix}:*)"
        )

    def unavailable(self, operation: str, exc: BaseException) -> StorageUnavailableError:
        return StorageUnavailableError(operation, f"{self.describe()}: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ eviction policy

    async def check_eviction_policy(self, operation: str) -> None:
        """Refuse a server (any node of a cluster) that may evict our keys; see docs/redis.md."""
        policies = await self._eviction_policies(operation)
        if policies is None:
            return
        for node, policy in policies.items():
            if policy.startswith("allkeys-"):
                evicts = "any key, checkpoints included,"
            elif policy in _EVICTS_KEYS_WITH_TTL and self.settings.ttl is not None:
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
        target: dict[str, Any] = {"target_nodes": RedisCluster.ALL_NODES} if self.cluster else {}
        # A command this server refused this user once is not sent again by any handle of the
        # process: each refusal is an entry in the server's ACL LOG, and a handle per request
        # would fill it (and the operator's alerts) with one pair of denials per handle.
        remembered = self._refused_probes()
        refusals: list[str] = []
        for command, argument, read in (
            ("config_get", "maxmemory-policy", config_policy),
            ("info", "memory", info_policy),
        ):
            if command in remembered:
                refusals.append(remembered[command])
                if remembered[command].startswith(_ACL_DENIAL):
                    break
                continue
            try:
                reply = await getattr(self.client, command)(argument, **target)
            except redis_errors.ResponseError as exc:  # unknown command, NOPERM, ...
                refusal = str(exc)
                if isinstance(exc, redis_errors.NoPermissionError) or "NOPERM" in refusal:
                    # Denied by the server's ACL: the user is restricted on purpose, and every
                    # denial is an ACL LOG entry, so INFO is not asked as well. (INFO is for
                    # services that rename or remove CONFIG.)
                    remembered[command] = f"{_ACL_DENIAL}{refusal}"
                    refusals.append(remembered[command])
                    break
                refusals.append(refusal)
                if stays_refused(exc):
                    remembered[command] = refusal
                continue
            except (redis_errors.RedisError, OSError) as exc:
                raise self.unavailable(operation, exc) from chainable(exc)
            return {node: read(answer) for node, answer in by_node(reply).items()}
        warn_unverified(self.describe(), refusals)
        return None

    def _refused_probes(self) -> dict[str, str]:
        """Policy probes refused to this connection's server and user (command -> the refusal),
        shared by every handle of the process: per client for a client given to the storage,
        per server and user for one built from a URL (each handle builds its own client)."""
        if self.injected is not None:
            return refused_probes_by_client.setdefault(self.injected, {})
        assert self.url is not None
        return refused_probes_by_server.setdefault(server_and_user(self.url), {})


def _packed(*commands: tuple[str | bytes, ...]) -> list[bytes]:
    """Commands in the protocol's request form (arrays of bulk strings, text in UTF-8 as the
    client's default encoder writes it), as chunks for one write: a large bytes argument is a
    chunk of its own, sent as it is rather than copied into a joined buffer."""
    chunks: list[bytes] = []
    parts: list[bytes] = []
    for command in commands:
        parts.append(b"*%d\r\n" % len(command))
        for argument in command:
            data = argument.encode() if isinstance(argument, str) else argument
            if len(data) < _SENT_APART:
                parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
                continue
            parts.append(b"$%d\r\n" % len(data))
            chunks += [b"".join(parts), data]
            parts = [b"\r\n"]
    chunks.append(b"".join(parts))
    return chunks


_SENT_APART = 16 * 1024
"""Arguments from this size on are written as chunks of their own (redis-py's cut-off is 6,000)."""
STAGE_TTL_MS = "60000"
"""A staged body's time to live: the script renames it into place or deletes it in the same
transaction, so it outlives that only if the transaction broke after writing it."""
NOT_RUN = object()
"""What :meth:`RedisConnection.run_staged` returns when its transaction could not be had."""


class Script:
    """One script on one client: ``EVALSHA``, loading the script when the server does not have
    it (a restarted or failed-over server). redis-py's ``AsyncScript`` does the same through
    three more coroutine layers per call."""

    __slots__ = ("_sent_sha", "client", "script", "sha")

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.script = SCRIPTS[name]
        self.sha = script_sha(name)
        self._sent_sha = self.sha.encode()

    async def __call__(self, *, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        sha, count = self._sent_sha, b"%d" % len(keys)
        try:
            return await self.client.execute_command("EVALSHA", sha, count, *keys, *args)
        except redis_errors.NoScriptError:
            await self.client.script_load(self.script)
            return await self.client.execute_command("EVALSHA", sha, count, *keys, *args)


def by_node(reply: Any) -> Mapping[str | None, Any]:
    """A cluster client answers a command sent to several nodes with {node name: reply}, and
    one sent to a single node (a one-node cluster) with the reply itself, as a plain client does."""
    if isinstance(reply, Mapping) and reply and all(isinstance(value, Mapping) for value in reply.values()):
        return {text(node): answer for node, answer in reply.items()}
    return {None: reply}


def config_policy(reply: Mapping[Any, Any]) -> str:
    return next((text(value) for key, value in reply.items() if text(key) == "maxmemory-policy"), "")


def info_policy(reply: Mapping[Any, Any]) -> str:
    return text(reply.get("maxmemory_policy", ""))


_ACL_DENIAL = "denied by ACL: "

refused_probes_by_server: dict[tuple[Any, ...], dict[str, str]] = {}
"""(server, user) of a URL -> the policy probes that server refused that user, for the process."""
refused_probes_by_client: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
"""The same for clients given to a storage, forgotten with the client."""


def server_and_user(url: str) -> tuple[Any, ...]:
    """What decides whether a probe is refused: the server (or cluster seed) and the ACL user;
    not the database, prefix or other options."""
    options = parse_url(driver_url(url))
    return (
        urlsplit(url).scheme.lower(),
        options.get("host"),
        options.get("port"),
        options.get("path"),
        options.get("username"),
        url_is_cluster(url),
    )


def stays_refused(exc: redis_errors.ResponseError) -> bool:
    """A refusal that asking again will not change: a command the server does not know (renamed
    or removed, as managed services do). ACL denials are remembered before this is asked."""
    return "unknown command" in str(exc).lower()


unverified_servers: set[str] = set()
"""Servers already warned about (once per process each): their eviction policy is unknown."""


def warn_unverified(server: str, refusals: Sequence[str]) -> None:
    if server in unverified_servers:
        return
    unverified_servers.add(server)
    _logger.warning(
        "%s: could not read the server's maxmemory-policy (%s); if it is an allkeys-* policy the "
        "server may evict checkpoints silently. Check it with the server's operator (docs/redis.md), "
        "or pass allow_evicting_policy=True to skip this check",
        server,
        redact_text("; ".join(refusals)),
    )


async def delete_prefix(client: Any, prefix: str) -> int:
    """Delete every key of the storage with this prefix, found with SCAN (never FLUSHALL); for
    tests and tooling. Keys of a longer prefix (``prefix:more``) are left alone."""
    keys = RedisKeys(prefix)
    deleted = int(await client.delete(keys.workflows))
    async for found in client.scan_iter(match=keys.tagged_pattern(), count=1000):
        deleted += int(await client.delete(found))
    return deleted
