"""S3 storage: checkpoints as objects in AWS S3 or an S3-compatible store (needs ``boto3``).

S3 has no transactions and no server-side counter, only create-only writes (``IfNoneMatch="*"``),
compare-and-swap writes (``IfMatch=etag``), strong read-after-write consistency and listings in
ascending key order. Everything below is built from those four facts.

Key layout (``P`` is the prefix, ``E(x)`` the escaped id or name, see :func:`escape_component`)::

    P r/E(id)                            the record: a JSON header line, then the encoded body
    P w/E(workflow)/t/R(seq).S.E(id)     order key of a top-level checkpoint (empty object)
    P w/E(workflow)/n/R(seq).S.E(id)     order key of a nested record (same sequence space)
    P w/E(workflow)/head                 pointer: {"seq": highest sequence ever committed, "id"}
    P w/E(workflow)/x/E(id)              tombstone of a pruned id, listed per workflow
    P x/E(id)                            the same tombstone, found by id during ancestry walks

``R(seq)`` is ``10**19 - 1 - seq``, zero-padded to 19 digits, so the newest checkpoint sorts
first: get_latest is one ``ListObjectsV2(MaxKeys=1)`` plus one GET, whatever the history length.
``S`` is a 24-hex-digit hash of the graph signature, so signature filters need no bodies.

Save (one checkpoint with its nested records), in this order; each step is one round trip of
requests sent concurrently:

1. Read each workflow's high-water mark: the pointer and the heads of ``t/`` and ``n/``. The new
   sequence is one more than their maximum.
2. Create the nested records, then the checkpoint's record, each with ``IfNoneMatch="*"``: the
   record key is the id, so this is where a duplicate id is caught (two writers, one wins).
3. Create the nested records' order keys, then the checkpoint's order key: **the commit point.**
   A record is visible (loadable, listed, latest) only once its order key exists.
4. Advance each workflow's pointer by compare-and-swap (``IfMatch``); it never moves backwards.

Crash points: after 2, the records are invisible (load raises not found) and a retried save
finds them, checks the digest and finishes steps 3 and 4 at the recorded sequence. After 3, the
checkpoint is committed; a stale pointer does not matter because the next save's high-water mark
and get_latest both read the head of the listing (latest = max(pointer, listing head)). The
pointer exists so that sequences never go back after the newest checkpoint is deleted.

Concurrent saves that read the same high-water mark share a sequence number; their order keys
differ in the id, so the listing still gives one total order that all readers see, and any save
that starts after another returned gets a higher number. Load is a GET of the record plus a
HEAD of its order key (the visibility check). Delete removes the order keys first, then the
records, so a crash in between leaves unlisted records that read as not found (garbage, removed
by deleting the id again).

Nested records carry their container and root; a checkpoint's header lists its members (every
nested record with its order key) so delete, prune and loads find them without listing. A retried
save adopts the nested records an earlier attempt at the same checkpoint left (their sequences go
into the container's header); stale ones with other content are replaced only on its last tries,
so a concurrent save of the same container id can store its container first and win.

Ancestry walks cost one GET per step, sequential because each step reveals the next id; the
nested records of a step are fetched concurrently.

Errors: 500/503 and throttling are retried by botocore (``standard`` mode, ``max_attempts``).
409 ``ConditionalRequestConflict`` (not retried by botocore) and a 412 that the object's state
does not explain are retried here, ``conflict_retries`` times with jittered backoff. Past either
budget, :class:`~storages.errors.StorageUnavailableError` names the operation and the key.

Why not claim each sequence number with a create-only write: the id is then not in the order key,
so listing ids and finding the latest would need a GET per order key; sharing a number between
overlapping saves costs nothing a reader can see. Why a HEAD on load: a record without its order key
(a crashed save) must read as absent, as it does in listings. Why no bucket creation by default: a
typo in a bucket name should fail loudly, not create a bucket (``create_bucket=True`` opts in).

boto3 is synchronous: each handle calls one client through its own bounded thread pool, sized to
the client's connection pool, so a burst of saves queues instead of blocking the event loop or
exhausting connections. An injected client is shared by every handle and never closed here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import json
import random
import re
import string
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from typing_extensions import Self

from .base import BaseCheckpointStorage, CheckpointRecord, FenceCheck, IndexEntry, StoredBody, WalkRecords
from .codec import CheckpointCodec, TypeRef
from .contract import Capability, CheckpointID, CheckpointInfo
from .errors import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    NestedCheckpointDeletionError,
    StorageClosedError,
    StorageConfigurationError,
    StorageUnavailableError,
)
from .integrity import IntegrityKeyInput
from .redaction import chainable, redact_url

URL_SCHEME = "s3"
URL_OPTIONS: tuple[str, ...] = (
    "endpoint_url",
    "region",
    "checksum",
    "create_bucket",
    "max_workers",
    "max_attempts",
    "conflict_retries",
    "sse",
    "sse_kms_key_id",
)
"""Query options ``s3://`` takes besides the common ones (see ``storages.urls``)."""
DEFAULT_MAX_WORKERS = 16
"""Threads (and pooled connections) per handle."""
DEFAULT_MAX_ATTEMPTS = 5
"""botocore attempts per request for 500/503/throttling (``standard`` retry mode)."""
DEFAULT_CONFLICT_RETRIES = 8
"""Retries of a conditional write answered 409, or 412 without cause, before giving up."""

_SEQUENCE_DIGITS = 19
_MAX_SEQUENCE = 10**_SEQUENCE_DIGITS - 1
_SAFE = frozenset(string.ascii_letters + string.digits + "_-")
_MAX_ESCAPED = 300
"""Escaped ids longer than this are replaced by a hash (S3 keys are limited to 1,024 bytes)."""
_HASHED = "!"
_DELETE_BATCH = 1000
_UNREAD = object()
"""The pointer has not been read yet."""
_LIST_PAGE = 1000

T = TypeVar("T")


def escape_component(text: str) -> str:
    """A key-safe, reversible spelling of an id or name: ``[A-Za-z0-9_-]`` stay, every other
    character becomes %XX of its UTF-8 bytes (so ``/``, ``.``, ``..`` and unicode cannot form path
    segments), and the caller always ends it with a separator outside that set, so ``wf1`` is
    never a prefix of ``wf10``. Very long results become ``!`` + a hash (not reversible)."""
    escaped = "".join(char if char in _SAFE else _percent(char) for char in text)
    if len(escaped) > _MAX_ESCAPED:
        return _HASHED + hashlib.blake2b(text.encode("utf-8"), digest_size=20).hexdigest()
    return escaped


def _percent(char: str) -> str:
    # Not urllib's quote: it leaves ".", "~" and "-" alone, and "." must never reach a key.
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))


def unescape_component(escaped: str) -> str | None:
    """The text :func:`escape_component` escaped, or None for a hashed one."""
    return None if escaped.startswith(_HASHED) else unquote(escaped)


def signature_tag(graph_signature_hash: str) -> str:
    return hashlib.blake2b(graph_signature_hash.encode("utf-8"), digest_size=12).hexdigest()


def _reverse(sequence: int) -> str:
    return f"{_MAX_SEQUENCE - sequence:0{_SEQUENCE_DIGITS}d}"


@dataclass(frozen=True, slots=True)
class _OrderEntry:
    """One order key, parsed: which record, at which sequence, in which listing."""

    key: str
    sequence: int
    tag: str
    escaped_id: str
    nested: bool

    @property
    def checkpoint_id(self) -> str | None:
        return unescape_component(self.escaped_id)


@dataclass(frozen=True, slots=True)
class _Member:
    """A record written by one save, as the checkpoint's header lists it."""

    checkpoint_id: CheckpointID
    workflow_name: str
    sequence: int
    tag: str


@dataclass(frozen=True, slots=True)
class _Header:
    checkpoint_id: CheckpointID
    workflow_name: str
    sequence: int
    previous_checkpoint_id: CheckpointID | None
    graph_signature_hash: str
    digest: str
    container_id: CheckpointID | None
    root_id: CheckpointID | None
    children: tuple[CheckpointID, ...]
    """Directly nested records, by position."""
    descendants: tuple[CheckpointID, ...]
    """Nested records at any depth."""
    members: tuple[_Member, ...]
    """For a top-level checkpoint: every nested record saved with it."""

    @property
    def member(self) -> _Member:
        return _Member(
            self.checkpoint_id, self.workflow_name, self.sequence, signature_tag(self.graph_signature_hash)
        )

    def encode(self) -> bytes:
        return json.dumps(
            {
                "id": self.checkpoint_id,
                "workflow": self.workflow_name,
                "seq": self.sequence,
                "previous": self.previous_checkpoint_id,
                "signature": self.graph_signature_hash,
                "digest": self.digest,
                "container": self.container_id,
                "root": self.root_id,
                "children": list(self.children),
                "descendants": list(self.descendants),
                "members": [[m.checkpoint_id, m.workflow_name, m.sequence, m.tag] for m in self.members],
            },
            separators=(",", ":"),
            ensure_ascii=True,
        ).encode("ascii")

    @classmethod
    def decode(cls, checkpoint_id: CheckpointID, raw: bytes) -> _Header:
        try:
            data = json.loads(raw)
            return cls(
                str(data["id"]),
                str(data["workflow"]),
                int(data["seq"]),
                data["previous"],
                str(data["signature"]),
                str(data["digest"]),
                data["container"],
                data["root"],
                tuple(data["children"]),
                tuple(data["descendants"]),
                tuple(_Member(str(i), str(w), int(s), str(t)) for i, w, s, t in data["members"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointCorruptedError(
                checkpoint_id, f"the S3 record header is unreadable: {exc}"
            ) from exc


@dataclass(frozen=True, slots=True)
class _Stored:
    """A record object as read: header, body and the ETag it was read at."""

    header: _Header
    body: bytes
    etag: str


@dataclass(frozen=True, slots=True)
class _Pointer:
    """A workflow's pointer as read: the highest sequence committed, the id that set it, its ETag."""

    sequence: int
    checkpoint_id: CheckpointID | None
    etag: str


@dataclass(frozen=True, slots=True)
class _FenceView:
    """What a fenced save reads first, in one round trip: the workflow's high-water mark, its
    pointer, and the head of its top-level listing."""

    mark: int
    pointer: _Pointer | None
    head: _OrderEntry | None


class _Precondition(Exception):
    """412: the conditional write's condition did not hold."""


class _Conflict(Exception):
    """409 ConditionalRequestConflict: a concurrent conditional write on the same key."""


class _Missing(Exception):
    """404 on a conditional write (IfMatch on a key that is gone)."""


class S3CheckpointStorage(BaseCheckpointStorage):
    """Checkpoints in an S3 bucket under a prefix. Handles on one bucket/prefix share one store."""

    capabilities = frozenset(
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
        codec: CheckpointCodec | None = None,
        allowed_checkpoint_types: Iterable[TypeRef] = (),
        allowed_modules: Iterable[str] = (),
        integrity_key: IntegrityKeyInput | None = None,
    ) -> None:
        super().__init__(
            codec=codec,
            allowed_checkpoint_types=allowed_checkpoint_types,
            allowed_modules=allowed_modules,
            integrity_key=integrity_key,
        )
        _check_bucket_name(bucket)
        if not isinstance(prefix, str):
            raise StorageConfigurationError(f"S3 prefix must be a str, got {prefix!r}")
        for name, value, low in (
            ("max_workers", max_workers, 1),
            ("max_attempts", max_attempts, 1),
            ("conflict_retries", conflict_retries, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise StorageConfigurationError(f"{name} must be an int >= {low}, got {value!r}")
        if checksum not in (None, "when_supported", "when_required"):
            raise StorageConfigurationError(
                f"checksum must be 'when_supported' or 'when_required', got {checksum!r}"
            )
        self._bucket = bucket
        self._prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self._injected_client = client
        self._endpoint_url = endpoint_url
        self._region = region
        self._put_parameters = dict(put_parameters or {})
        self._checksum = checksum
        self._create_bucket = create_bucket
        self._max_workers = max_workers
        self._max_attempts = max_attempts
        self._conflict_retries = conflict_retries
        self._client: Any = None
        self._executor: ThreadPoolExecutor | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """``s3://bucket/prefix?endpoint_url=...&region=...&create_bucket=true&checksum=when_required
        &sse=aws:kms&sse_kms_key_id=...``; keywords (``client=``, ``put_parameters=``) win."""
        parts = urlsplit(url)
        if parts.scheme.lower() != URL_SCHEME or not parts.netloc:
            raise StorageConfigurationError(f"Not an S3 URL: {url!r}; expected s3://bucket/prefix")
        from .urls import allowance_options

        parsed = url_options(url)
        settings: dict[str, Any] = dict(allowance_options(parsed))
        put_parameters: dict[str, Any] = {}
        for name, value in parsed.items():
            if name in ("endpoint_url", "region", "checksum"):
                settings[name] = value or None
            elif name == "create_bucket":
                if value.lower() not in ("", "0", "1", "true", "false", "yes", "no"):
                    raise StorageConfigurationError(
                        f"create_bucket in {redact_url(url)!r} must be true or false, got {value!r}"
                    )
                settings[name] = value.lower() in ("1", "true", "yes")
            elif name in ("max_workers", "max_attempts", "conflict_retries"):
                try:
                    settings[name] = int(value)
                except ValueError:
                    raise StorageConfigurationError(f"{name} in {url!r} must be an int") from None
            elif name == "sse":
                put_parameters["ServerSideEncryption"] = value
            elif name == "sse_kms_key_id":
                put_parameters["SSEKMSKeyId"] = value
        if put_parameters:
            settings["put_parameters"] = put_parameters
        settings.update(options)
        return cls(parts.netloc, unquote(parts.path), **settings)

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def prefix(self) -> str:
        return self._prefix

    def describe(self) -> str:
        return f"{URL_SCHEME}://{self._bucket}/{self._prefix}"

    def new_handle(self) -> Self:
        return type(self)(
            self._bucket,
            self._prefix,
            client=self._injected_client,
            endpoint_url=self._endpoint_url,
            region=self._region,
            put_parameters=self._put_parameters,
            checksum=self._checksum,
            create_bucket=False,
            max_workers=self._max_workers,
            max_attempts=self._max_attempts,
            conflict_retries=self._conflict_retries,
            codec=self._codec,
        )

    # ------------------------------------------------------------------ lifecycle

    async def _open(self) -> None:
        self._executor = ThreadPoolExecutor(self._max_workers, thread_name_prefix="s3-checkpoints")
        if self._injected_client is not None:
            self._client = self._injected_client
        else:
            self._client = await self._run("open", self._bucket, self._build_client)
        if self._create_bucket:
            await self._run("open", self._bucket, self._ensure_bucket)

    async def _close(self) -> None:
        executor, self._executor = self._executor, None
        client, self._client = self._client, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True)
        if client is not None and client is not self._injected_client:
            with contextlib.suppress(Exception):
                client.close()

    def _build_client(self) -> Any:
        import boto3
        from botocore.config import Config

        config: dict[str, Any] = {
            "max_pool_connections": self._max_workers,
            "retries": {"mode": "standard", "max_attempts": self._max_attempts},
        }
        if self._checksum is not None:
            config["request_checksum_calculation"] = self._checksum
            config["response_checksum_validation"] = self._checksum
        # Sessions are not thread-safe; a session of our own keeps other code's default session out.
        session = boto3.session.Session()
        return session.client(
            "s3", endpoint_url=self._endpoint_url, region_name=self._region, config=Config(**config)
        )

    def _ensure_bucket(self) -> None:
        from botocore.exceptions import ClientError

        try:
            self._client.head_bucket(Bucket=self._bucket)
            return
        except ClientError as exc:
            if _status(exc) != 404:
                raise
        arguments: dict[str, Any] = {"Bucket": self._bucket}
        region = self._region or self._client.meta.region_name
        if region and region != "us-east-1":
            arguments["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self._client.create_bucket(**arguments)
        except ClientError as exc:
            if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    # ------------------------------------------------------------------ keys

    def _record_key(self, checkpoint_id: CheckpointID) -> str:
        return f"{self._prefix}r/{escape_component(checkpoint_id)}"

    def _workflow_prefix(self, workflow_name: str) -> str:
        return f"{self._prefix}w/{escape_component(workflow_name)}/"

    def _order_prefix(self, workflow_name: str, nested: bool) -> str:
        return self._workflow_prefix(workflow_name) + ("n/" if nested else "t/")

    def _order_key(self, member: _Member, nested: bool) -> str:
        return (
            f"{self._order_prefix(member.workflow_name, nested)}"
            f"{_reverse(member.sequence)}.{member.tag}.{escape_component(member.checkpoint_id)}"
        )

    def _pointer_key(self, workflow_name: str) -> str:
        return self._workflow_prefix(workflow_name) + "head"

    def _tombstone_keys(self, workflow_name: str, checkpoint_id: CheckpointID) -> tuple[str, str]:
        escaped = escape_component(checkpoint_id)
        return f"{self._workflow_prefix(workflow_name)}x/{escaped}", f"{self._prefix}x/{escaped}"

    def _parse_order_key(self, key: str, nested: bool) -> _OrderEntry | None:
        name = key.rpartition("/")[2]
        reverse, _, rest = name.partition(".")
        tag, _, escaped_id = rest.partition(".")
        if len(reverse) != _SEQUENCE_DIGITS or not reverse.isdigit() or not escaped_id:
            return None  # not ours; never happens under our prefix
        return _OrderEntry(key, _MAX_SEQUENCE - int(reverse), tag, escaped_id, nested)

    # ------------------------------------------------------------------ writes

    async def _insert(self, record: CheckpointRecord) -> str | None:
        return await self._insert_family((record,))

    async def _insert_family(self, records: Sequence[CheckpointRecord]) -> str | None:
        top = records[0]
        for attempt in range(self._conflict_retries + 1):
            headers, pointers = await self._headers_for(records)
            if len(records) > 1:
                last_try = attempt >= self._conflict_retries - 1
                nested = await self._settle_nested(top, headers[1:], records[1:], may_replace=last_try)
                if nested is None:
                    await _backoff(attempt)
                    continue  # a nested record changed under the save, or is being saved: try again
                # Records adopted from an earlier attempt keep the sequences they were written with.
                headers[0] = dataclasses.replace(headers[0], members=tuple(h.member for h in nested))
            if await self._create("save", self._record_key(top.checkpoint_id), headers[0], top.body):
                await self._commit(headers[0], "save", pointers)
                return None
            existing = await self._read(top.checkpoint_id, "save")
            if existing is None:
                continue  # deleted between the write and the read: try again
            # Same id stored, maybe left half-saved by a crash or still being saved by a concurrent
            # writer: finish its commit (idempotent: its order keys are fixed by its header).
            if not await self._visible(existing.header, "save"):
                await self._commit(existing.header, "save")
            return existing.header.digest
        raise StorageUnavailableError(
            "save", f"{self.describe()}: {self._record_key(top.checkpoint_id)} kept changing under the save"
        )

    async def _insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        """A fenced save: the same steps as a save, plus one compare-and-swap of the workflow's
        pointer (``IfMatch`` the ETag read with the check) between creating the record and its
        order key. That swap is the commit point: of fenced writers that checked the same latest,
        one moves the pointer and the others get 412, re-check and are refused. A pointer naming
        a record above the listing's head is a fenced save that has not created its order key
        yet (or crashed before it); the next fenced save finishes that commit before checking."""
        top = records[0]
        workflow = top.workflow_name
        for attempt in range(self._conflict_retries + 1):
            view = await self._fence_view(workflow)
            latest = await self._fenced_latest(workflow, view, expected_latest_id)
            if latest == top.checkpoint_id:
                stored = await self._read(top.checkpoint_id, "save")
                if stored is not None:
                    return FenceCheck(latest, stored.header.digest)
                continue  # deleted since: check again
            if latest != expected_latest_id:
                stored = await self._read(top.checkpoint_id, "save")
                visible = stored is not None and await self._visible(stored.header, "save")
                return FenceCheck(latest, stored.header.digest if stored is not None and visible else None)
            pair = None if view.pointer is None else (view.pointer.sequence, view.pointer.etag)
            headers, pointers = await self._headers_for(records, known={workflow: (view.mark, pair)})
            if len(records) > 1:
                last_try = attempt >= self._conflict_retries - 1
                nested = await self._settle_nested(top, headers[1:], records[1:], may_replace=last_try)
                if nested is None:
                    await _backoff(attempt)
                    continue
                headers[0] = dataclasses.replace(headers[0], members=tuple(h.member for h in nested))
            key = self._record_key(top.checkpoint_id)
            if not await self._create("save", key, headers[0], top.body):
                stored = await self._read(top.checkpoint_id, "save")
                if stored is None:
                    continue
                if await self._visible(stored.header, "save") or stored.header.digest != top.digest:
                    return FenceCheck(latest, stored.header.digest)
                # An earlier attempt at this save that never committed: rewrite it with this
                # attempt's sequence, then commit it.
                try:
                    await self._run(
                        "save", key, self._put, key, _frame(headers[0], top.body), {"IfMatch": stored.etag}
                    )
                except (_Precondition, _Conflict, _Missing):
                    await _backoff(attempt)
                    continue
            sequence = max(
                m.sequence for m in (headers[0].member, *headers[0].members) if m.workflow_name == workflow
            )
            if not await self._swap_pointer(workflow, view.pointer, sequence, top.checkpoint_id):
                # Another writer committed since the check: this attempt's records never became
                # visible; remove them and check again.
                await self._delete_keys(
                    "save", [key, *(self._record_key(m.checkpoint_id) for m in headers[0].members)]
                )
                await _backoff(attempt)
                continue
            pointers[workflow] = (sequence, view.pointer.etag if view.pointer is not None else "")
            await self._commit(headers[0], "save", pointers)
            return None
        raise StorageUnavailableError(
            "save", f"{self.describe()}: the pointer of workflow {workflow!r} kept moving under a fenced save"
        )

    async def _fence_view(self, workflow_name: str) -> _FenceView:
        pointer_key = self._pointer_key(workflow_name)
        top_prefix = self._order_prefix(workflow_name, False)
        pointer, (top_page, _), nested = await asyncio.gather(
            self._read_full_pointer(pointer_key, "save"),
            self._run("save", top_prefix, self._list_page, top_prefix, None, 1),
            self._head_sequence(workflow_name, True, "save"),
        )
        head = self._parse_order_key(top_page[0], False) if top_page else None
        mark = max(0 if pointer is None else pointer.sequence, 0 if head is None else head.sequence, nested)
        return _FenceView(mark, pointer, head)

    async def _fenced_latest(
        self, workflow_name: str, view: _FenceView, expected_latest_id: CheckpointID | None
    ) -> CheckpointID | None:
        """The workflow's latest as a fenced save must see it, rolling forward a fenced commit
        whose pointer swap is done but whose order key is not. A head naming the expected id is
        taken as read (a delete removes order keys before records, so a listed head has its
        record); any other head is checked against its record first."""
        head_sequence = 0 if view.head is None else view.head.sequence
        pointer = view.pointer
        if pointer is not None and pointer.checkpoint_id is not None and pointer.sequence > head_sequence:
            stored = await self._read(pointer.checkpoint_id, "save")
            if (
                stored is not None
                and stored.header.workflow_name == workflow_name
                and stored.header.container_id is None
                and stored.header.sequence > head_sequence
            ):
                await self._commit(stored.header, "save")
                return pointer.checkpoint_id
        if view.head is None:
            return None
        if view.head.checkpoint_id is not None and view.head.checkpoint_id == expected_latest_id:
            return view.head.checkpoint_id
        if view.head.checkpoint_id is not None and await self._read_entry(view.head, "save") is not None:
            return view.head.checkpoint_id
        # The head names a record deleted (or hashed) since: ask the full latest lookup.
        latest = await self._latest(workflow_name, None)
        return None if latest is None else latest.checkpoint_id

    async def _swap_pointer(
        self, workflow_name: str, seen: _Pointer | None, sequence: int, checkpoint_id: CheckpointID
    ) -> bool:
        """Move the pointer from the state ``seen`` to (sequence, id); False if it moved since."""
        key = self._pointer_key(workflow_name)
        body = json.dumps({"seq": sequence, "id": checkpoint_id}).encode("utf-8")
        condition = {"IfNoneMatch": "*"} if seen is None else {"IfMatch": seen.etag}
        try:
            await self._run("save", key, self._put, key, body, condition)
        except (_Precondition, _Conflict, _Missing):
            return False
        return True

    async def _settle_nested(
        self,
        top: CheckpointRecord,
        headers: Sequence[_Header],
        records: Sequence[CheckpointRecord],
        *,
        may_replace: bool,
    ) -> list[_Header] | None:
        """Create the nested records of a save, adopting those an earlier attempt at the same
        checkpoint left (a crash, or a concurrent identical save); returns their headers as stored,
        or None if one changed under the save.

        A nested record of this checkpoint with other content, whose container is not stored, is
        either a concurrent save's (its container is about to be written, and the container's
        create-only write will decide) or a crashed attempt's: it is replaced only on the last
        tries (``may_replace``), so a concurrent writer has had time to finish."""
        created = await self._gather(
            self._create("save", self._record_key(h.checkpoint_id), h, r.body)
            for h, r in zip(headers, records, strict=True)
        )
        written = [
            self._record_key(h.checkpoint_id) for h, made in zip(headers, created, strict=True) if made
        ]
        settled: list[_Header] = []
        for header, record, made in zip(headers, records, created, strict=True):
            if made:
                settled.append(header)
                continue
            existing = await self._read(header.checkpoint_id, "save")
            if existing is None:
                return None
            if existing.header.root_id != top.checkpoint_id:
                await self._delete_keys("save", written)
                raise CheckpointConflictError(
                    header.checkpoint_id,
                    f"embedded in checkpoint {header.container_id!r}, but a record with this "
                    "id is already stored; an embedded checkpoint needs an id of its own",
                )
            if existing.header.digest != header.digest and not await self._exists(
                "save", self._record_key(top.checkpoint_id)
            ):
                if not may_replace:
                    return None
                # Left by a crashed attempt with other content that nothing refers to: replace it.
                key = self._record_key(header.checkpoint_id)
                try:
                    await self._run(
                        "save", key, self._put, key, _frame(header, record.body), {"IfMatch": existing.etag}
                    )
                except (_Precondition, _Conflict, _Missing):
                    return None
                settled.append(header)
            else:
                settled.append(existing.header)
        return settled

    async def _headers_for(
        self,
        records: Sequence[CheckpointRecord],
        known: Mapping[str, tuple[int, tuple[int, str] | None]] | None = None,
    ) -> tuple[list[_Header], dict[str, tuple[int, str] | None]]:
        """Headers for a save, each record with the next sequence numbers of its workflow, and the
        pointers as read (so advancing them needs no second read unless another save moved them).
        ``known`` gives high-water marks and pointers already read, by workflow name."""
        names = list(dict.fromkeys(record.workflow_name for record in records))
        known = known or {}
        unread = [name for name in names if name not in known]
        read = await self._gather(self._high_water(name, "save") for name in unread)
        marks = [known[name] if name in known else read[unread.index(name)] for name in names]
        next_sequence = {name: mark + 1 for name, (mark, _) in zip(names, marks, strict=True)}
        pointers = {name: pointer for name, (_, pointer) in zip(names, marks, strict=True)}
        sequences: list[int] = []
        for record in records:
            sequences.append(next_sequence[record.workflow_name])
            next_sequence[record.workflow_name] += 1
        children: dict[CheckpointID, list[CheckpointID]] = {r.checkpoint_id: [] for r in records}
        for record in records[1:]:
            assert record.container_id is not None
            children[record.container_id].append(record.checkpoint_id)

        def descendants(checkpoint_id: CheckpointID) -> list[CheckpointID]:
            found: list[CheckpointID] = []
            for child in children[checkpoint_id]:
                found.append(child)
                found.extend(descendants(child))
            return found

        members = tuple(
            _Member(r.checkpoint_id, r.workflow_name, s, signature_tag(r.graph_signature_hash))
            for r, s in zip(records[1:], sequences[1:], strict=True)
        )
        headers = [
            _Header(
                record.checkpoint_id,
                record.workflow_name,
                sequence,
                record.previous_checkpoint_id,
                record.graph_signature_hash,
                record.digest,
                record.container_id,
                record.root_id,
                tuple(children[record.checkpoint_id]),
                tuple(descendants(record.checkpoint_id)),
                members if position == 0 else (),
            )
            for position, (record, sequence) in enumerate(zip(records, sequences, strict=True))
        ]
        return headers, pointers

    async def _commit(
        self, header: _Header, operation: str, pointers: Mapping[str, tuple[int, str] | None] | None = None
    ) -> None:
        """Steps 3 and 4 of a save: order keys (the checkpoint's last), then the pointers."""
        if header.members:
            await self._gather(
                self._create(operation, self._order_key(m, True), None, b"") for m in header.members
            )
        await self._create(operation, self._order_key(header.member, False), None, b"")
        highest: dict[str, int] = {}
        for member in (header.member, *header.members):
            highest[member.workflow_name] = max(highest.get(member.workflow_name, 0), member.sequence)
        await self._gather(
            self._advance_pointer(name, seq, header.checkpoint_id, (pointers or {}).get(name, _UNREAD))
            for name, seq in highest.items()
        )

    async def _advance_pointer(
        self,
        workflow_name: str,
        sequence: int,
        checkpoint_id: CheckpointID,
        known: tuple[int, str] | object | None = _UNREAD,
    ) -> None:
        key = self._pointer_key(workflow_name)
        body = json.dumps({"seq": sequence, "id": checkpoint_id}).encode("utf-8")
        for attempt in range(self._conflict_retries + 1):
            if attempt == 0 and known is not _UNREAD:
                current = known if isinstance(known, tuple) else None
            else:
                current = await self._read_pointer(key, "save")
            if current is not None and current[0] >= sequence:
                return  # never backwards
            condition = {"IfNoneMatch": "*"} if current is None else {"IfMatch": current[1]}
            try:
                await self._run("save", key, self._put, key, body, condition)
                return
            except (_Precondition, _Conflict, _Missing):
                await _backoff(attempt)
        raise StorageUnavailableError(
            "save",
            f"{self.describe()}: pointer {key} could not be advanced after {self._conflict_retries} retries",
        )

    async def _remove(self, checkpoint_id: CheckpointID) -> bool:
        stored = await self._read(checkpoint_id, "delete")
        if stored is None:
            return False
        header = stored.header
        if header.container_id is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, header.container_id)
        visible = await self._visible(header, "delete")
        await self._drop_families("delete", [header])
        return visible

    async def _drop_families(self, operation: str, headers: Sequence[_Header]) -> None:
        """Order keys first (the records stop being visible), then the records."""
        order_keys = [self._order_key(h.member, False) for h in headers]
        order_keys += [self._order_key(m, True) for h in headers for m in h.members]
        await self._delete_keys(operation, order_keys)
        records = [self._record_key(h.checkpoint_id) for h in headers]
        records += [self._record_key(m.checkpoint_id) for h in headers for m in h.members]
        await self._delete_keys(operation, records)

    async def _overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        key = self._record_key(checkpoint_id)
        for attempt in range(self._conflict_retries + 1):
            stored = await self._read(checkpoint_id, "write_raw_body")
            if stored is None or not await self._visible(stored.header, "write_raw_body"):
                return False
            # The digest is kept: it records what was saved, so a re-save still compares contents.
            try:
                await self._run(
                    "write_raw_body",
                    key,
                    self._put,
                    key,
                    _frame(stored.header, body),
                    {"IfMatch": stored.etag},
                )
                return True
            except (_Precondition, _Conflict, _Missing):
                await _backoff(attempt)
        raise StorageUnavailableError("write_raw_body", f"{self.describe()}: {key} kept changing")

    async def _prune(self, workflow_name: str, keep_last: int) -> int:
        entries = await self._entries(workflow_name, nested=False, operation="prune")
        doomed = entries[keep_last:]  # newest first
        headers = await self._headers_of(doomed, "prune")
        tombstones = {checkpoint_id for h in headers for checkpoint_id in (h.checkpoint_id, *h.descendants)}
        body = json.dumps({"workflow": workflow_name}).encode("utf-8")
        # Tombstones first: a crash part-way leaves tombstones of live records, never a pruned
        # ancestor that a walk reports as a dangling link. Pruning again finishes the job.
        await self._gather(
            self._run("prune", key, self._put, key, body, {})
            for checkpoint_id in tombstones
            for key in self._tombstone_keys(workflow_name, checkpoint_id)
        )
        await self._drop_families("prune", headers)
        return len(headers)

    async def _delete_workflow(self, workflow_name: str) -> int:
        entries = await self._entries(workflow_name, nested=False, operation="delete_workflow")
        headers = await self._headers_of(entries, "delete_workflow")
        await self._drop_families("delete_workflow", headers)
        tombstone_prefix = self._workflow_prefix(workflow_name) + "x/"
        keys = await self._list_keys("delete_workflow", tombstone_prefix)
        global_keys = [f"{self._prefix}x/{key[len(tombstone_prefix) :]}" for key in keys]
        await self._delete_keys("delete_workflow", [*keys, *global_keys])
        # The pointer stays: a later save must get a higher sequence than anything before.
        return len(headers)

    # ------------------------------------------------------------------ reads

    async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
        stored = await self._load(checkpoint_id)
        return None if stored is None else stored.body

    async def _load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        stored = await self._read(checkpoint_id, "load")
        if stored is None or not await self._visible(stored.header, "load"):
            return None
        return _stored(stored)

    async def _latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        prefix = self._order_prefix(workflow_name, False)
        tag = None if graph_signature_hash is None else signature_tag(graph_signature_hash)
        start_after: str | None = None
        while True:
            # Unfiltered: the first key is the answer, one item suffices. Filtered: a page at a time.
            page, more = await self._run(
                "get_latest", prefix, self._list_page, prefix, start_after, 1 if tag is None else _LIST_PAGE
            )
            for key in page:
                start_after = key
                entry = self._parse_order_key(key, False)
                if entry is None or (tag is not None and entry.tag != tag):
                    continue
                stored = await self._read_entry(entry, "get_latest", lost_is_error=True)
                if stored is not None and (
                    graph_signature_hash is None or stored.header.graph_signature_hash == graph_signature_hash
                ):
                    return _stored(stored)
            if not more:
                return None

    async def _list(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        entries = await self._listing(workflow_name, graph_signature_hash, include_nested, "list_checkpoints")
        stored = await self._gather(
            self._read_entry(entry, "list_checkpoints", lost_is_error=True) for entry in entries
        )
        return [
            _stored(item)
            for item in stored
            # None: deleted since the listing, as if the listing had come a moment later.
            if item is not None
            and (graph_signature_hash is None or item.header.graph_signature_hash == graph_signature_hash)
        ]

    async def _list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        entries = await self._listing(
            workflow_name, graph_signature_hash, include_nested, "list_checkpoint_ids"
        )
        ids: list[CheckpointID] = []
        for entry in entries:
            checkpoint_id = entry.checkpoint_id
            if checkpoint_id is None:  # a hashed (very long) id: the record knows it
                stored = await self._read_entry(entry, "list_checkpoint_ids", lost_is_error=True)
                if stored is None:
                    continue
                checkpoint_id = stored.header.checkpoint_id
            ids.append(checkpoint_id)
        return ids

    async def _nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        containers = await self._gather(self._read(i, "load") for i in checkpoint_ids)
        wanted = list(dict.fromkeys(d for c in containers if c is not None for d in c.header.descendants))
        found = await self._gather(self._read(i, "load") for i in wanted)
        return {item.header.checkpoint_id: item.body for item in found if item is not None}

    async def _walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            stored = await self._read(current, "walk_ancestry")
            if (
                stored is not None
                and current == checkpoint_id
                and not await self._visible(stored.header, "walk_ancestry")
            ):
                stored = None
            if stored is None:
                if await self._exists("walk_ancestry", self._tombstone_keys("", current)[1]):
                    tombstones.add(current)
                break
            header = stored.header
            links[current] = header.previous_checkpoint_id
            if with_bodies:
                bodies[current] = stored.body
                nested = await self._gather(self._read(i, "walk_ancestry") for i in header.descendants)
                bodies.update((n.header.checkpoint_id, n.body) for n in nested if n is not None)
            current = header.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def _nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        stored = await self._read(checkpoint_id, "list_nested")
        if stored is None or not await self._visible(stored.header, "list_nested"):
            return None
        return list(stored.header.children)

    async def _workflow_names(self) -> list[str]:
        prefix = f"{self._prefix}w/"
        escaped = await self._run("list_workflows", prefix, self._common_prefixes, prefix)
        names: list[str] = []

        async def check(escaped_name: str) -> None:
            order_prefix = f"{prefix}{escaped_name}/t/"
            page, _ = await self._run("list_workflows", order_prefix, self._list_page, order_prefix, None, 1)
            if not page:
                return
            name = unescape_component(escaped_name)
            if name is None:
                entry = self._parse_order_key(page[0], False)
                stored = None if entry is None else await self._read_entry(entry, "list_workflows")
                if stored is None:
                    return
                name = stored.header.workflow_name
            names.append(name)

        await self._gather(check(name) for name in escaped)
        return names

    async def _info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        stored = await self._read(checkpoint_id, "checkpoint_info")
        if stored is None or not await self._visible(stored.header, "checkpoint_info"):
            return None
        return _info(stored)

    async def _records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        if workflow_name is not None:
            entries = await self._listing(workflow_name, None, True, "list_records")
        else:
            entries = []
            for key in await self._list_keys("list_records", f"{self._prefix}w/"):
                kind = key.rsplit("/", 2)[-2] if key.count("/") >= 2 else ""
                if kind in ("t", "n"):
                    entry = self._parse_order_key(key, kind == "n")
                    if entry is not None:
                        entries.append(entry)
        stored = await self._gather(self._read_entry(entry, "list_records") for entry in entries)
        return [_info(item) for item in stored if item is not None]

    async def _tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        prefix = f"{self._prefix}x/" if workflow_name is None else self._workflow_prefix(workflow_name) + "x/"
        keys = await self._list_keys("list_tombstones", prefix)
        ids: list[CheckpointID] = []
        for key in keys:
            checkpoint_id = unescape_component(key[len(prefix) :])
            if checkpoint_id is not None:
                ids.append(checkpoint_id)
        return ids

    # ------------------------------------------------------------------ machinery

    async def _high_water(self, workflow_name: str, operation: str) -> tuple[int, tuple[int, str] | None]:
        """The highest sequence a workflow has used, max(pointer, heads of both listings), and
        the pointer (sequence, ETag) as read."""
        pointer, top, nested = await asyncio.gather(
            self._read_pointer(self._pointer_key(workflow_name), operation),
            self._head_sequence(workflow_name, False, operation),
            self._head_sequence(workflow_name, True, operation),
        )
        return max(0 if pointer is None else pointer[0], top, nested), pointer

    async def _head_sequence(self, workflow_name: str, nested: bool, operation: str) -> int:
        prefix = self._order_prefix(workflow_name, nested)
        page, _ = await self._run(operation, prefix, self._list_page, prefix, None, 1)
        entry = self._parse_order_key(page[0], nested) if page else None
        return 0 if entry is None else entry.sequence

    async def _read_full_pointer(self, key: str, operation: str) -> _Pointer | None:
        found = await self._run(operation, key, self._get_object, key)
        if found is None:
            return None
        raw, etag = found
        try:
            data = json.loads(raw)
            checkpoint_id = data.get("id")
            return _Pointer(int(data["seq"]), checkpoint_id if isinstance(checkpoint_id, str) else None, etag)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageUnavailableError(
                operation, f"{self.describe()}: pointer {key} is unreadable: {exc}"
            ) from exc

    async def _read_pointer(self, key: str, operation: str) -> tuple[int, str] | None:
        found = await self._run(operation, key, self._get_object, key)
        if found is None:
            return None
        raw, etag = found
        try:
            return int(json.loads(raw)["seq"]), etag
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageUnavailableError(
                operation, f"{self.describe()}: pointer {key} is unreadable: {exc}"
            ) from exc

    async def _read(self, checkpoint_id: CheckpointID, operation: str) -> _Stored | None:
        key = self._record_key(checkpoint_id)
        found = await self._run(operation, key, self._get_object, key)
        if found is None:
            return None
        raw, etag = found
        head, newline, body = raw.partition(b"\n")
        if not newline:
            raise CheckpointCorruptedError(checkpoint_id, f"the S3 object {key} has no record header")
        header = _Header.decode(checkpoint_id, head)
        if header.checkpoint_id != checkpoint_id and escape_component(checkpoint_id)[0] != _HASHED:
            raise CheckpointCorruptedError(
                checkpoint_id, f"the S3 object {key} holds checkpoint {header.checkpoint_id!r}"
            )
        return _Stored(header, body, etag)

    async def _read_entry(
        self, entry: _OrderEntry, operation: str, *, lost_is_error: bool = False
    ) -> _Stored | None:
        """The record an order key names, or None if it was deleted (or re-saved) since.

        A delete removes the order key before the record, so an order key that is still there
        while its record is missing (or is another save's) was not left by a delete: the record
        was lost behind the storage's back. With ``lost_is_error`` (the reads that return
        checkpoints) that raises rather than act as if the checkpoint never existed: a get_latest
        would otherwise return an older one. Maintenance (prune, inspect) skips it.
        """
        checkpoint_id = entry.checkpoint_id
        if checkpoint_id is None:
            stored = await self._read_hashed(entry.escaped_id, operation)
        else:
            stored = await self._read(checkpoint_id, operation)
        if stored is not None and stored.header.sequence == entry.sequence:
            return stored
        if lost_is_error and await self._exists(operation, entry.key):
            named = checkpoint_id if checkpoint_id is not None else entry.escaped_id
            found = "is missing" if stored is None else f"holds sequence {stored.header.sequence}"
            raise CheckpointCorruptedError(
                named, f"its order key {entry.key!r} is listed but its record {found}; nothing was deleted"
            )
        return None

    async def _read_hashed(self, escaped_id: str, operation: str) -> _Stored | None:
        key = f"{self._prefix}r/{escaped_id}"
        found = await self._run(operation, key, self._get_object, key)
        if found is None:
            return None
        head, _, body = found[0].partition(b"\n")
        header = _Header.decode(escaped_id, head)
        return _Stored(header, body, found[1])

    async def _visible(self, header: _Header, operation: str) -> bool:
        """Committed: its order key exists (a crashed save's record has none)."""
        return await self._exists(operation, self._order_key(header.member, header.container_id is not None))

    async def _exists(self, operation: str, key: str) -> bool:
        return bool(await self._run(operation, key, self._head_object, key))

    async def _headers_of(self, entries: Sequence[_OrderEntry], operation: str) -> list[_Header]:
        stored = await self._gather(self._read_entry(entry, operation) for entry in entries)
        return [item.header for item in stored if item is not None]

    async def _entries(self, workflow_name: str, *, nested: bool, operation: str) -> list[_OrderEntry]:
        """Order entries of one listing, newest first."""
        prefix = self._order_prefix(workflow_name, nested)
        keys = await self._list_keys(operation, prefix)
        return [entry for key in keys if (entry := self._parse_order_key(key, nested)) is not None]

    async def _listing(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool, operation: str
    ) -> list[_OrderEntry]:
        """Order entries oldest first, optionally with nested ones and of one signature."""
        if include_nested:
            top, nested = await asyncio.gather(
                self._entries(workflow_name, nested=False, operation=operation),
                self._entries(workflow_name, nested=True, operation=operation),
            )
            entries = sorted([*top, *nested], key=lambda e: e.key.rpartition("/")[2])
        else:
            entries = await self._entries(workflow_name, nested=False, operation=operation)
        if graph_signature_hash is not None:
            tag = signature_tag(graph_signature_hash)
            entries = [entry for entry in entries if entry.tag == tag]
        entries.reverse()
        return entries

    async def _create(self, operation: str, key: str, header: _Header | None, body: bytes) -> bool:
        """Create-only write: True if created, False if the key already exists."""
        data = body if header is None else _frame(header, body)
        for attempt in range(self._conflict_retries + 1):
            try:
                await self._run(operation, key, self._put, key, data, {"IfNoneMatch": "*"})
                return True
            except _Precondition:
                # 412 normally means "exists"; make sure it does before relying on it.
                if await self._exists(operation, key):
                    return False
            except _Conflict:
                pass
            await _backoff(attempt)
        raise StorageUnavailableError(
            operation,
            f"{self.describe()}: conditional write of {key} still conflicted after "
            f"{self._conflict_retries} retries",
        )

    async def _delete_keys(self, operation: str, keys: Sequence[str]) -> None:
        unique = list(dict.fromkeys(keys))
        await self._gather(
            self._run(operation, batch[0], self._delete_batch, batch)
            for batch in (unique[i : i + _DELETE_BATCH] for i in range(0, len(unique), _DELETE_BATCH))
        )

    async def _list_keys(self, operation: str, prefix: str) -> list[str]:
        keys: list[str] = []
        start_after: str | None = None
        while True:
            page, more = await self._run(operation, prefix, self._list_page, prefix, start_after, _LIST_PAGE)
            keys.extend(page)
            if not more or not page:
                return keys
            start_after = page[-1]

    async def _gather(self, awaitables: Iterable[Any]) -> list[Any]:
        return list(await asyncio.gather(*awaitables))

    async def _run(self, operation: str, key: str, function: Callable[..., T], *args: Any) -> T:
        """Run a blocking client call on this handle's thread pool; errors become typed errors."""
        executor = self._executor
        if executor is None:
            raise StorageClosedError(self.describe(), operation)
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(executor, functools.partial(function, *args))
        except RuntimeError as exc:  # the pool was shut down by aclose()
            raise StorageClosedError(self.describe(), operation) from exc
        try:
            return await future
        except (_Precondition, _Conflict, _Missing, StorageConfigurationError):
            raise
        except Exception as exc:
            raise self._translate(operation, key, exc) from chainable(exc)

    def _translate(self, operation: str, key: str, exc: Exception) -> Exception:
        code = _code(exc)
        if code == "NoSuchBucket":
            return StorageConfigurationError(
                f"{self.describe()}: bucket {self._bucket!r} does not exist; create it, or pass "
                "create_bucket=true in the URL (create_bucket=True as a keyword)"
            )
        detail = f"{code}: {exc}" if code else f"{type(exc).__name__}: {exc}"
        return StorageUnavailableError(operation, f"{self.describe()} key {key!r}: {detail}")

    # Blocking calls, run on the thread pool -------------------------------------------------

    def _put(self, key: str, data: bytes, condition: Mapping[str, str]) -> None:
        from botocore.exceptions import ClientError

        try:
            self._client.put_object(
                Bucket=self._bucket, Key=key, Body=data, **condition, **self._put_parameters
            )
        except ClientError as exc:
            status, code = _status(exc), _code(exc)
            if status == 412 or code == "PreconditionFailed":
                raise _Precondition(key) from exc
            if status == 409 or code == "ConditionalRequestConflict":
                raise _Conflict(key) from exc
            if condition and (status == 404 or code == "NoSuchKey"):
                raise _Missing(key) from exc
            raise

    def _get_object(self, key: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import ClientError

        try:
            response = self._client.get_object(Bucket=self._bucket, Key=key)
        except ClientError as exc:
            if _code(exc) == "NoSuchKey" or (_status(exc) == 404 and _code(exc) != "NoSuchBucket"):
                return None
            raise
        with contextlib.closing(response["Body"]) as stream:
            return bytes(stream.read()), str(response.get("ETag", ""))

    def _head_object(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._client.head_object(Bucket=self._bucket, Key=key)
        except ClientError as exc:
            if _status(exc) == 404 or _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def _list_page(self, prefix: str, start_after: str | None, max_keys: int) -> tuple[list[str], bool]:
        arguments: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix, "MaxKeys": max_keys}
        if start_after is not None:
            arguments["StartAfter"] = start_after
        response = self._client.list_objects_v2(**arguments)
        keys = [str(item["Key"]) for item in response.get("Contents", [])]
        return keys, bool(response.get("IsTruncated"))

    def _common_prefixes(self, prefix: str) -> list[str]:
        names: list[str] = []
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self._bucket, Prefix=prefix, Delimiter="/"):
            for item in page.get("CommonPrefixes", []):
                names.append(str(item["Prefix"])[len(prefix) :].rstrip("/"))
        return names

    def _delete_batch(self, keys: Sequence[str]) -> None:
        response = self._client.delete_objects(
            Bucket=self._bucket, Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True}
        )
        errors = response.get("Errors") or []
        if errors:
            first = errors[0]
            raise StorageUnavailableError(
                "delete",
                f"{self.describe()}: {len(errors)} of {len(keys)} deletes failed, e.g. "
                f"{first.get('Key')!r}: {first.get('Code')} {first.get('Message')}",
            )


_BUCKET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]")
"""What S3 (and botocore, which refuses other names before sending) accepts as a bucket name:
3 to 63 letters, digits, dots, hyphens and (legacy buckets) underscores and capitals, starting
and ending with a letter or digit."""


def _check_bucket_name(bucket: object) -> None:
    if not isinstance(bucket, str) or _BUCKET_NAME.fullmatch(bucket) is None or ".." in bucket:
        raise StorageConfigurationError(
            f"Invalid S3 bucket name {bucket!r}: a bucket name is 3 to 63 characters, letters, "
            "digits, dots and hyphens, starting and ending with a letter or digit"
        )


def url_options(url: str) -> dict[str, str]:
    """An S3 URL's query options; a name not in :data:`URL_OPTIONS` (or the common ones) raises
    StorageConfigurationError listing the valid ones."""
    from .urls import parse_url_options

    return parse_url_options(url, urlsplit(url).query, URL_OPTIONS, what="S3")


def _frame(header: _Header, body: bytes) -> bytes:
    return header.encode() + b"\n" + body


def _info(stored: _Stored) -> CheckpointInfo:
    header = stored.header
    return CheckpointInfo(
        checkpoint_id=header.checkpoint_id,
        workflow_name=header.workflow_name,
        previous_checkpoint_id=header.previous_checkpoint_id,
        graph_signature_hash=header.graph_signature_hash,
        container_id=header.container_id,
        sequence=header.sequence,
        size=len(stored.body),
    )


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def _status(exc: BaseException) -> int:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return 0


async def _backoff(attempt: int) -> None:
    # Jittered exponential backoff, capped: racing writers spread out instead of colliding again.
    await asyncio.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))  # noqa: S311 - not crypto


def _stored(stored: _Stored) -> StoredBody:
    """A body with the index entry its object's header gives, for the read to check it against."""
    header = stored.header
    entry = IndexEntry(header.workflow_name, header.previous_checkpoint_id, header.graph_signature_hash)
    return StoredBody(header.checkpoint_id, stored.body, entry=entry)


__all__ = [
    "DEFAULT_CONFLICT_RETRIES",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_WORKERS",
    "S3CheckpointStorage",
    "escape_component",
    "signature_tag",
    "unescape_component",
]
