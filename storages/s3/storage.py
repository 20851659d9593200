"""``S3CheckpointStorage``: the storage over an :class:`~storages.s3.backend.S3Backend`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self

from ..codec import CheckpointCodec, TypeRef
from ..engine import CheckpointStore
from ..integrity import IntegrityKeyInput
from .backend import S3Backend
from .config import DEFAULT_CONFLICT_RETRIES, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_WORKERS, S3Settings, parse_url


class S3CheckpointStorage(CheckpointStore[S3Backend]):
    """Checkpoints in an S3 bucket under a prefix. Handles on one bucket/prefix share one store.

    The options are the backend's settings (:class:`~storages.s3.config.S3Settings`;
    :class:`~storages.s3.backend.S3Backend` says what opening checks, and what
    ``unsafe_single_writer`` gives up).
    """

    backend_class: ClassVar[type[S3Backend]] = S3Backend
    """The backend this class builds from its settings. A subclass names a subclass of it to
    store through its own backend with this class's settings, URLs and handles."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        region: str | None = None,
        put_parameters: Mapping[str, Any] | None = None,
        checksum: str | None = None,
        create_bucket: bool = False,
        max_workers: int = DEFAULT_MAX_WORKERS,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
        unsafe_single_writer: bool = False,
        codec: CheckpointCodec | None = None,
        allowed_checkpoint_types: Iterable[TypeRef] = (),
        allowed_modules: Iterable[str] = (),
        integrity_key: IntegrityKeyInput | None = None,
    ) -> None:
        settings = S3Settings(
            bucket,
            prefix,
            client=client,
            endpoint_url=endpoint_url,
            region=region,
            put_parameters=put_parameters or {},
            checksum=checksum,
            create_bucket=create_bucket,
            max_workers=max_workers,
            max_attempts=max_attempts,
            conflict_retries=conflict_retries,
            unsafe_single_writer=unsafe_single_writer,
        )
        super().__init__(
            self.backend_class(settings),
            codec=codec,
            allowed_checkpoint_types=allowed_checkpoint_types,
            allowed_modules=allowed_modules,
            integrity_key=integrity_key,
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """``s3://bucket/prefix?endpoint_url=...&region=...&create_bucket=true&checksum=when_required
        &sse=aws:kms&sse_kms_key_id=...&unsafe_single_writer=true``; keywords (``client=``,
        ``put_parameters=``) win."""
        bucket, prefix, settings = parse_url(url, options)
        return cls(bucket, prefix, **settings)

    @property
    def settings(self) -> S3Settings:
        return self.backend.settings

    @property
    def bucket(self) -> str:
        return self.backend.bucket

    @property
    def read_only(self) -> bool:
        return self.backend.settings.read_only

    def read_only_handle(self) -> Self:
        """A new handle on this bucket and prefix that only reads, with this handle's codec and
        keys: what inspect, verify and diff open. Opening it checks the bucket exists
        (StoreNotFoundError if not) and writes nothing: no bucket, no conditional-write probe."""
        settings = dataclasses.replace(self.backend.settings, read_only=True, create_bucket=False)
        return self.over(self.backend_class(settings))

    @property
    def prefix(self) -> str:
        return self.backend.prefix
