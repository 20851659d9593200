"""``PostgresCheckpointStorage``: the storage over a :class:`~storages.postgres.backend.PostgresBackend`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Self

from psycopg_pool import AsyncConnectionPool

from ..codec import CheckpointCodec, TypeRef
from ..engine import CheckpointStore
from ..integrity import IntegrityKeyInput
from ..query_options import allowance_options
from .backend import PostgresBackend
from .client import Connection
from .config import PostgresOptions


class PostgresCheckpointStorage(CheckpointStore[PostgresBackend]):
    """Checkpoints in a PostgreSQL schema. Handles on one schema, in any process on any host,
    share one store.

    ``url``, ``pool`` or ``connection``, ``schema``, ``table_prefix``, ``pool_size``,
    ``pool_timeout`` and ``retries`` are the backend's
    (:class:`~storages.postgres.backend.PostgresBackend` says what each does).
    """

    backend_class: ClassVar[type[PostgresBackend]] = PostgresBackend
    """The backend this class builds from its settings. A subclass names a subclass of it to
    store through its own backend with this class's settings, URLs and handles."""

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        connection: Connection | None = None,
        schema: str | None = None,
        table_prefix: str | None = None,
        pool_size: int | None = None,
        pool_timeout: float | None = None,
        retries: int | None = None,
        codec: CheckpointCodec | None = None,
        allowed_checkpoint_types: Iterable[TypeRef] = (),
        allowed_modules: Iterable[str] = (),
        integrity_key: IntegrityKeyInput | None = None,
    ) -> None:
        backend = self.backend_class(
            url,
            pool=pool,
            connection=connection,
            schema=schema,
            table_prefix=table_prefix,
            pool_size=pool_size,
            pool_timeout=pool_timeout,
            retries=retries,
        )
        super().__init__(
            backend,
            codec=codec,
            allowed_checkpoint_types=allowed_checkpoint_types,
            allowed_modules=allowed_modules,
            integrity_key=integrity_key,
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        codec: CheckpointCodec | None = None,
        schema: str | None = None,
        table_prefix: str | None = None,
        pool_size: int | None = None,
        pool_timeout: float | None = None,
        retries: int | None = None,
    ) -> Self:
        """``postgresql://user:password@host:port/db?schema=...&pool_size=...`` (or ``postgres://``);
        ``table_prefix``, ``pool_timeout`` and ``retries`` too, and libpq's own options
        (``sslmode=...``). A keyword wins over the URL."""
        from .config import url_options

        options = url_options(url)
        return cls(
            url,
            schema=schema,
            table_prefix=table_prefix,
            pool_size=pool_size,
            pool_timeout=pool_timeout,
            retries=retries,
            codec=codec,
            **allowance_options(options),
        )

    @property
    def schema(self) -> str:
        return self.backend.schema

    @property
    def table_prefix(self) -> str:
        return self.backend.table_prefix

    @property
    def options(self) -> PostgresOptions:
        return self.backend.options

    @property
    def read_only(self) -> bool:
        """The handle only reads (see :attr:`PostgresBackend.read_only`)."""
        return self.backend.read_only

    def read_only_handle(self) -> Self:
        """A new handle on this schema that only reads, with this handle's codec and keys: what
        inspect, verify and diff open. It neither creates nor migrates the schema, refuses one
        that does not exist (StoreNotFoundError), and its connections run read-only transactions."""
        return self.over(self.backend.new_handle(read_only=True))

    @property
    def statements_sent(self) -> int:
        """Statements (round trips) this handle has sent; the kit's ``scale`` clauses count them."""
        return self.backend.statements_sent
