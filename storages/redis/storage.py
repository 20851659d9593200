"""``RedisCheckpointStorage``: the storage over a :class:`~storages.redis.backend.RedisBackend`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from ..codec import CheckpointCodec, TypeRef
from ..engine import CheckpointStore
from ..integrity import IntegrityKeyInput
from ..query_options import allowance_options
from .backend import RedisBackend
from .config import DEFAULT_PREFIX, check_scheme, url_flag, url_options, url_ttl
from .keys import RedisKeys


class RedisCheckpointStorage(CheckpointStore[RedisBackend]):
    """Checkpoints on a Redis server or cluster, under a key prefix.

    ``client`` or ``url``, ``prefix``, ``ttl``, ``client_options`` and ``allow_evicting_policy``
    are the backend's (:class:`~storages.redis.backend.RedisBackend` says what each does,
    including the eviction-policy check made on first use).
    """

    backend_class: ClassVar[type[RedisBackend]] = RedisBackend
    """The backend this class builds from its settings. A subclass names a subclass of it to
    store through its own backend with this class's settings, URLs and handles."""

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
        backend = self.backend_class(
            client,
            url=url,
            prefix=prefix,
            ttl=ttl,
            client_options=client_options,
            allow_evicting_policy=allow_evicting_policy,
        )
        super().__init__(
            backend,
            codec=codec,
            allowed_checkpoint_types=allowed_checkpoint_types,
            allowed_modules=allowed_modules,
            integrity_key=integrity_key,
        )

    @classmethod
    def from_url(cls, url: str, *, codec: CheckpointCodec | None = None, **client_options: Any) -> Self:
        """``redis://[user:password@]host:port/db?prefix=...&ttl=...``, ``rediss://`` for TLS;
        add ``cluster=true`` for a Redis Cluster (any node as the seed) and
        ``allow_evicting_policy=true`` to accept a maxmemory-policy that may evict checkpoints.
        Other query options go to redis-py."""

        options = url_options(check_scheme(url))
        return cls(
            url=url,
            prefix=options.get("prefix", DEFAULT_PREFIX),
            ttl=url_ttl(url, options),
            codec=codec,
            client_options=client_options,
            allow_evicting_policy=url_flag(url, "allow_evicting_policy"),
            **allowance_options(options),
        )

    @property
    def prefix(self) -> str:
        return self.backend.prefix

    @property
    def allow_evicting_policy(self) -> bool:
        """Whether the eviction-policy check is skipped (see docs/redis.md)."""
        return self.backend.allow_evicting_policy

    @property
    def read_only(self) -> bool:
        return self.backend.read_only

    def read_only_handle(self) -> Self:
        """A new handle on this prefix that only reads, with this handle's codec and keys: what
        inspect, verify and diff open. Every write raises; the eviction policy is not checked."""
        return self.over(self.backend.new_handle(read_only=True))

    @property
    def cluster(self) -> bool:
        return self.backend.cluster

    @property
    def keys(self) -> RedisKeys:
        return self.backend.keys
