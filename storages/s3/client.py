"""The boto3 side of the S3 storage: one client, blocking calls off the event loop, retries of
conditional writes, and botocore errors translated into the storage's typed errors.

boto3 is synchronous. Each handle calls one client through its own bounded thread pool, sized to
the client's connection pool, so a burst of saves queues instead of blocking the event loop or
exhausting connections. A client built here lives in a boto3 session of its own (sessions are
not thread-safe); an injected client is shared by every handle and never closed here.

500/503 and throttling are retried by botocore (``standard`` mode, ``max_attempts``). 409
``ConditionalRequestConflict`` (which botocore does not retry) and a 412 that the object's state
does not explain are retried by :meth:`S3Client.create`, ``conflict_retries`` times with jittered
backoff; other conditional writes surface :class:`PreconditionFailed` / :class:`ConditionalConflict`
/ :class:`MissingKey` to the commit protocol, which decides.

Conditional writes (what a condition that failed raises, and which stores were found to
enforce them) are in storages/s3/precondition.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..errors import (
    ConditionalWritesNotEnforcedError,
    StorageClosedError,
    StorageConfigurationError,
    StorageUnavailableError,
    StoreNotFoundError,
)
from ..redaction import chainable, redact_url
from .config import S3Settings
from .precondition import (
    CONDITION_FAILED,
    CREATE_ONLY,
    ENFORCING_STORES,
    OPT_OUT,
    PROBE_DIRECTORY,
    WRONG_ETAG,
    ConditionalConflict,
    EnforcingStores,
    MissingKey,
    PreconditionFailed,
)

T = TypeVar("T")

LIST_PAGE = 1000
"""Keys per ListObjectsV2 page (S3's maximum)."""
DELETE_BATCH = 1000
"""Keys per DeleteObjects request (S3's maximum)."""
_EMULATED_CONDITIONS = threading.Lock()
"""unsafe_single_writer: one read-then-write at a time in this process, so that two saves of one
process cannot both pass a check before either writes."""


class S3Client:
    """One handle's requests: every method but :meth:`open` raises StorageClosedError once the
    handle is closed, and every failure past the retries raises a typed error naming the
    operation and the key."""

    def __init__(self, settings: S3Settings) -> None:
        self._settings = settings
        self._client: Any = None
        self._executor: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        self._executor = ThreadPoolExecutor(self._settings.max_workers, thread_name_prefix="s3-checkpoints")
        try:
            if self._settings.client is not None:
                self._client = self._settings.client
            else:
                self._client = await self.run("open", self._settings.bucket, self._build_client)
            if self._settings.read_only:
                # Nothing is created or probed: a bucket that is not there is a URL naming nothing.
                await self.run("open", self._settings.bucket, self._require_bucket)
                return
            if self._settings.create_bucket:
                await self.run("open", self._settings.bucket, self._ensure_bucket)
            if not self._settings.unsafe_single_writer and self._settings not in ENFORCING_STORES:
                await self.verify_conditional_writes()
                ENFORCING_STORES.add(self._settings)
        except BaseException:
            await self.close()  # a failed open holds no threads or connections; the next one retries
            raise

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        client, self._client = self._client, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True)
        if client is not None and client is not self._settings.client:
            with contextlib.suppress(Exception):
                client.close()

    # ------------------------------------------------------------------ requests

    async def get(self, operation: str, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and ETag, or None if it does not exist."""
        return await self.run(operation, key, self._get_object, key)

    async def exists(self, operation: str, key: str) -> bool:
        return await self.run(operation, key, self._head_object, key)

    async def put(self, operation: str, key: str, data: bytes, condition: Mapping[str, str] = {}) -> str:
        """One PutObject, returning the new ETag; a failed condition raises one of
        :data:`CONDITION_FAILED`."""
        self._refuse_if_read_only(operation)
        return await self.run(operation, key, self._put, key, data, condition)

    def _refuse_if_read_only(self, operation: str) -> None:
        if self._settings.read_only:
            raise StorageConfigurationError(
                f"{self._settings.describe()} was opened read-only: {operation} would write; open "
                "it without read_only to write"
            )

    async def create(self, operation: str, key: str, data: bytes) -> bool:
        """Create-only write: True if created, False if the key already exists."""
        retries = self._settings.conflict_retries
        for attempt in range(retries + 1):
            try:
                await self.put(operation, key, data, CREATE_ONLY)
                return True
            except PreconditionFailed:
                # 412 normally means "exists"; make sure it does before relying on it.
                if await self.exists(operation, key):
                    return False
            except (ConditionalConflict, MissingKey):
                pass
            await backoff(attempt)
        raise StorageUnavailableError(
            operation,
            f"{self._settings.describe()}: conditional write of {key} still conflicted after "
            f"{retries} retries",
        )

    async def verify_conditional_writes(self) -> None:
        """The probe: on one new object under :data:`PROBE_DIRECTORY`, a create-only write must
        succeed, a second one and an ``If-Match`` with a wrong ETag must be refused (412 or 409),
        and an ``If-Match`` with the ETag the store returned must succeed. 4 PutObject (the middle
        two concurrent) and 1 DeleteObjects, in 4 round trips. Raises
        ConditionalWritesNotEnforcedError naming what the store did instead."""
        key = f"{self._settings.prefix}{PROBE_DIRECTORY}{uuid.uuid4().hex}"
        try:
            failure = await self._probe(key)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.delete_keys("open", [key])
            raise
        await self.delete_keys("open", [key])
        if failure is not None:
            raise ConditionalWritesNotEnforcedError(self.store_name(), failure, OPT_OUT)

    async def _probe(self, key: str) -> str | None:
        """What the store got wrong, or None."""
        body = b"conditional-write probe of checkpoint-storages (see docs/s3.md); safe to delete"
        etag = await self._put_retrying(key, body, CREATE_ONLY, read_back=True)
        if etag is None:
            return f"a create-only write (If-None-Match: *) of the new object {key} was refused"

        async def refused(condition: Mapping[str, str]) -> bool:
            try:
                await self.put("open", key, body, condition)
            except CONDITION_FAILED:
                return True
            return False

        recreate, wrong_etag = await gather([refused(CREATE_ONLY), refused({"IfMatch": WRONG_ETAG})])
        if not recreate:
            return f"a create-only write (If-None-Match: *) over the existing object {key} succeeded"
        if not wrong_etag:
            return f"a compare-and-swap (If-Match) with a wrong ETag on {key} succeeded"
        if await self._put_retrying(key, body, {"IfMatch": etag}) is None:
            return f"a compare-and-swap (If-Match) with the ETag the store returned for {key} was refused"
        return None

    async def _put_retrying(
        self, key: str, data: bytes, condition: Mapping[str, str], *, read_back: bool = False
    ) -> str | None:
        """A conditional write that should succeed: its ETag, or None if refused every time (a 409,
        or a 412 injected by a test, is retried like :meth:`create` does). ``read_back`` (the
        probe's create-only write of a key no one else writes): a refusal of a resend is this
        write's own effect when the object holds ``data``, so its ETag is the answer."""
        for attempt in range(self._settings.conflict_retries + 1):
            try:
                return await self.put("open", key, data, condition)
            except CONDITION_FAILED as refused:
                if read_back and refused.resent:
                    found = await self.get("open", key)
                    if found is not None and found[0] == data:
                        return found[1]
                await backoff(attempt)
        return None

    def store_name(self) -> str:
        """The store as errors name it: bucket, prefix and endpoint, never credentials."""
        endpoint = self._settings.endpoint_url
        if endpoint is None and self._client is not None:
            endpoint = str(getattr(self._client.meta, "endpoint_url", "") or "") or None
        where = self._settings.describe()
        return where if endpoint is None else f"{where} at {redact_url(endpoint)}"

    async def list_page(
        self, operation: str, prefix: str, start_after: str | None = None, max_keys: int = LIST_PAGE
    ) -> tuple[list[str], bool]:
        """One ListObjectsV2 page: its keys (ascending) and whether more follow."""
        return await self.run(operation, prefix, self._list_page, prefix, start_after, max_keys)

    async def first_key(self, operation: str, prefix: str) -> str | None:
        page, _ = await self.list_page(operation, prefix, None, 1)
        return page[0] if page else None

    async def list_keys(self, operation: str, prefix: str) -> list[str]:
        keys: list[str] = []
        start_after: str | None = None
        while True:
            page, more = await self.list_page(operation, prefix, start_after)
            keys.extend(page)
            if not more or not page:
                return keys
            start_after = page[-1]

    async def common_prefixes(self, operation: str, prefix: str) -> list[str]:
        return await self.run(operation, prefix, self._common_prefixes, prefix)

    async def delete_keys(self, operation: str, keys: Sequence[str]) -> None:
        """DeleteObjects, 1,000 keys a request, the batches concurrent."""
        self._refuse_if_read_only(operation)
        unique = list(dict.fromkeys(keys))
        await gather(
            self.run(operation, batch[0], self._delete_batch, operation, batch)
            for batch in (unique[i : i + DELETE_BATCH] for i in range(0, len(unique), DELETE_BATCH))
        )

    async def run(self, operation: str, key: str, function: Callable[..., T], *args: Any) -> T:
        """Run a blocking client call on this handle's thread pool; errors become typed errors."""
        executor = self._executor
        if executor is None:
            raise StorageClosedError(self._settings.describe(), operation)
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(executor, functools.partial(function, *args))
        except RuntimeError as exc:  # the pool was shut down by aclose()
            raise StorageClosedError(self._settings.describe(), operation) from exc
        try:
            return await future
        except (*CONDITION_FAILED, StorageConfigurationError, StorageUnavailableError):
            raise
        except Exception as exc:
            raise self._translate(operation, key, exc) from chainable(exc)

    def _translate(self, operation: str, key: str, exc: Exception) -> Exception:
        code = _code(exc)
        describe = self._settings.describe()
        if code == "NoSuchBucket" and self._settings.read_only:
            return StoreNotFoundError(describe, f"bucket {self._settings.bucket!r} does not exist")
        if code == "NoSuchBucket":
            return StorageConfigurationError(
                f"{describe}: bucket {self._settings.bucket!r} does not exist; create it, or pass "
                "create_bucket=true in the URL (create_bucket=True as a keyword)"
            )
        detail = f"{code}: {exc}" if code else f"{type(exc).__name__}: {exc}"
        return StorageUnavailableError(operation, f"{describe} key {key!r}: {detail}")

    # ------------------------------------------------------------------ blocking calls (pool threads)

    def _build_client(self) -> Any:
        import boto3
        from botocore.config import Config

        settings = self._settings
        config: dict[str, Any] = {
            "max_pool_connections": settings.max_workers,
            "retries": {"mode": "standard", "max_attempts": settings.max_attempts},
        }
        if settings.checksum is not None:
            config["request_checksum_calculation"] = settings.checksum
            config["response_checksum_validation"] = settings.checksum
        # Sessions are not thread-safe; a session of our own keeps other code's default session out.
        session = boto3.session.Session()
        return session.client(
            "s3", endpoint_url=settings.endpoint_url, region_name=settings.region, config=Config(**config)
        )

    def _require_bucket(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self._client.head_bucket(Bucket=self._settings.bucket)
        except ClientError as exc:
            if _status(exc) == 404:
                raise StoreNotFoundError(
                    self._settings.describe(), f"bucket {self._settings.bucket!r} does not exist"
                ) from None
            raise

    def _ensure_bucket(self) -> None:
        from botocore.exceptions import ClientError

        bucket = self._settings.bucket
        try:
            self._client.head_bucket(Bucket=bucket)
            return
        except ClientError as exc:
            if _status(exc) != 404:
                raise
        arguments: dict[str, Any] = {"Bucket": bucket}
        region = self._settings.region or self._client.meta.region_name
        if region and region != "us-east-1":
            arguments["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self._client.create_bucket(**arguments)
        except ClientError as exc:
            if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    def _put(self, key: str, data: bytes, condition: Mapping[str, str]) -> str:
        if condition and self._settings.unsafe_single_writer:
            with _EMULATED_CONDITIONS:
                self._check_condition_by_reading(key, condition)
                return self._put_object(key, data, condition)
        return self._put_object(key, data, condition)

    def _put_object(self, key: str, data: bytes, condition: Mapping[str, str]) -> str:
        from botocore.exceptions import ClientError

        try:
            response = self._client.put_object(
                Bucket=self._settings.bucket, Key=key, Body=data, **condition, **self._settings.put_parameters
            )
        except ClientError as exc:
            status, code, resent = _status(exc), _code(exc), _resent(exc)
            if status == 412 or code == "PreconditionFailed":
                raise PreconditionFailed(key, resent=resent) from exc
            if status == 409 or code == "ConditionalRequestConflict":
                raise ConditionalConflict(key, resent=resent) from exc
            if condition and (status == 404 or code == "NoSuchKey"):
                raise MissingKey(key, resent=resent) from exc
            raise
        return str(response.get("ETag", ""))

    def _check_condition_by_reading(self, key: str, condition: Mapping[str, str]) -> None:
        """unsafe_single_writer: the store may ignore the condition, so one HEAD checks it first
        (the headers are still sent: a store that enforces them still decides)."""
        from botocore.exceptions import ClientError

        etag: str | None
        try:
            etag = str(self._client.head_object(Bucket=self._settings.bucket, Key=key).get("ETag", ""))
        except ClientError as exc:
            if _status(exc) != 404 and _code(exc) not in ("404", "NoSuchKey", "NotFound"):
                raise
            etag = None
        if condition.get("IfNoneMatch") == "*" and etag is not None:
            raise PreconditionFailed(key, resent=False)
        expected = condition.get("IfMatch")
        if expected is not None and etag is None:
            raise MissingKey(key, resent=False)
        if expected is not None and etag != expected:
            raise PreconditionFailed(key, resent=False)

    def _get_object(self, key: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import ClientError

        try:
            response = self._client.get_object(Bucket=self._settings.bucket, Key=key)
        except ClientError as exc:
            if _code(exc) == "NoSuchKey" or (_status(exc) == 404 and _code(exc) != "NoSuchBucket"):
                return None
            raise
        with contextlib.closing(response["Body"]) as stream:
            return bytes(stream.read()), str(response.get("ETag", ""))

    def _head_object(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._client.head_object(Bucket=self._settings.bucket, Key=key)
        except ClientError as exc:
            if _status(exc) == 404 or _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def _list_page(self, prefix: str, start_after: str | None, max_keys: int) -> tuple[list[str], bool]:
        arguments: dict[str, Any] = {"Bucket": self._settings.bucket, "Prefix": prefix, "MaxKeys": max_keys}
        if start_after is not None:
            arguments["StartAfter"] = start_after
        response = self._client.list_objects_v2(**arguments)
        keys = [str(item["Key"]) for item in response.get("Contents", [])]
        return keys, bool(response.get("IsTruncated"))

    def _common_prefixes(self, prefix: str) -> list[str]:
        names: list[str] = []
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self._settings.bucket, Prefix=prefix, Delimiter="/"):
            for item in page.get("CommonPrefixes", []):
                names.append(str(item["Prefix"])[len(prefix) :].rstrip("/"))
        return names

    def _delete_batch(self, operation: str, keys: Sequence[str]) -> None:
        response = self._client.delete_objects(
            Bucket=self._settings.bucket, Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True}
        )
        errors = response.get("Errors") or []
        if errors:
            first = errors[0]
            raise StorageUnavailableError(
                operation,
                f"{self._settings.describe()}: {len(errors)} of {len(keys)} deletes failed, e.g. "
                f"{first.get('Key')!r}: {first.get('Code')} {first.get('Message')}",
            )


async def gather(awaitables: Iterable[Any]) -> list[Any]:
    return list(await asyncio.gather(*awaitables))


async def backoff(attempt: int) -> None:
    # Jittered exponential backoff, capped: racing writers spread out instead of colliding again.
    await asyncio.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))  # noqa: S311 - not crypto


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def _resent(exc: BaseException) -> bool:
    """Whether botocore sent the request more than once before this answer (its retry count in
    the response metadata); True when the answer does not say."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        attempts = response.get("ResponseMetadata", {}).get("RetryAttempts")
        if isinstance(attempts, int):
            return attempts > 0
    return True


def _status(exc: BaseException) -> int:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return 0


__all__ = [
    "CREATE_ONLY",
    "WRONG_ETAG",
    "CONDITION_FAILED",
    "ENFORCING_STORES",
    "OPT_OUT",
    "PROBE_DIRECTORY",
    "ConditionalConflict",
    "EnforcingStores",
    "MissingKey",
    "PreconditionFailed",
    "S3Client",
    "backoff",
    "gather",
]
