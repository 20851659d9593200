"""A seventh blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only README.md, docs/contract.md,
docs/backends.md, docs/registry.md, docs/integrity.md, docs/conformance.md's prose, examples/ and
the public author API could ship. Three styles, each with an honest storage that passes the whole
kit:

* a backend in the style of an object store (``ObjectBackend`` over an in-memory ``Bucket``): one
  object per record under keys with prefixes, listings by prefix in key order, create-only puts
  (if-none-match) and compare-and-swap puts (if-match an etag), no transaction over keys; each
  request awaits (other tasks run meanwhile), so every primitive holds the bucket's lease object
  (a create-only put, deleted when done), and a workflow's numbers come from a counter object
  advanced by compare-and-swap; it declares every capability but ``ttl`` and ``durable``;
* wrappers around the built-in in-memory storage (``MemoryWrapper``) that add what deployments
  add: a circuit breaker, a rate limiter, retries, integrity-key handling and anchors;
* six-method MAF-style storages keeping one pydantic model per checkpoint with its codec body
  (``SixPydanticRows``).

No style declares ``ttl``: the ``expiry`` family waits out the storage's own time to live within
its 19 s, and a time to live that short expires checkpoints under every other clause (the model
family alone runs 12 s), so a ``ttl`` backend cannot pass the whole kit in one run.

``ENTRIES`` lists them as (name, factory, defect); a factory returns a
``conformance.StorageTarget``. tests/kit/blind_batch_seven.md has the kit's verdicts.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, Self
from urllib.parse import quote, quote_plus, unquote

from pydantic import BaseModel, ConfigDict

from conformance import StorageTarget
from storages import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    InMemoryCheckpointStorage,
    NestedCheckpointDeletionError,
    StaleWriterError,
    StorageUnavailableError,
)
from storages.backend import (
    Backend,
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    latest_record,
    nested_id_conflict,
    pruned_records,
    resume_point,
    rivals_of,
)
from storages.codec import CheckpointCodec
from storages.contract import Capability, CheckpointID, CheckpointInfo, validate_identifier
from storages.engine import CheckpointStore

# ====================================================================== an object store


class Bucket:
    """An object store in memory: objects by key with an etag, listings by prefix in key order
    (pages of 1,000 keys after a start key), create-only puts and compare-and-swap puts. Each
    request is atomic on the store and awaits once, as a request over the network would."""

    PAGE = 1000

    def __init__(self) -> None:
        self.objects: dict[str, tuple[int, bytes]] = {}
        self.guard = threading.Lock()
        self._etags = 0

    async def _request(self) -> None:
        await asyncio.sleep(0)

    def _put_now(self, key: str, data: bytes, if_none_match: bool, if_match: int | None) -> bool:
        with self.guard:
            found = self.objects.get(key)
            if if_none_match and found is not None:
                return False
            if if_match is not None and (found is None or found[0] != if_match):
                return False
            self._etags += 1
            self.objects[key] = (self._etags, bytes(data))
            return True

    def delete_now(self, key: str) -> bool:
        with self.guard:
            return self.objects.pop(key, None) is not None

    async def get(self, key: str) -> tuple[int, bytes] | None:
        await self._request()
        with self.guard:
            return self.objects.get(key)

    async def put(
        self, key: str, data: bytes, *, if_none_match: bool = False, if_match: int | None = None
    ) -> bool:
        await self._request()
        return self._put_now(key, data, if_none_match, if_match)

    async def delete(self, key: str) -> bool:
        await self._request()
        return self.delete_now(key)

    async def list_page(self, prefix: str, start_after: str = "") -> list[str]:
        await self._request()
        with self.guard:
            keys = sorted(k for k in self.objects if k.startswith(prefix) and k > start_after)
        return keys[: self.PAGE]


LEASE = "lease"


def _segment(text: str) -> str:
    """A key segment: every character but unreserved ones percent-encoded, "/" and "%" included."""
    return quote(text, safe="")


class ObjectBackend(Backend):
    """Checkpoints in an object store: a JSON document per record (``r/<id>``), an order key per
    record (``o/<workflow>/<sequence>``, listed by prefix in key order), a counter object per
    workflow advanced by compare-and-swap, a key per child (``k/<container>/<position>``) and two
    per tombstone (``t/<workflow>/<id>`` and ``i/<id>``), every segment percent-encoded. Every
    primitive holds the bucket's lease (a create-only put of one object), since no request spans
    several keys."""

    capabilities = frozenset(
        {
            Capability.SIGNATURE_FILTER,
            Capability.ANCESTRY,
            Capability.NESTED,
            Capability.PRUNE,
            Capability.LIST_WORKFLOWS,
            Capability.RAW_ACCESS,
            Capability.INSPECT,
            Capability.FENCING,
            Capability.PENDING_WRITES,
            Capability.SHARED,
        }
    )

    def __init__(
        self, bucket: Bucket | None = None, *, access_key: str = "AKIA-BLIND7", secret: str = "s3cr3t-blind7"
    ) -> None:
        self.bucket = bucket if bucket is not None else Bucket()
        self.access_key = access_key
        self.secret = secret

    def describe(self) -> str:
        return "objmem://bucket"

    def new_handle(self) -> Self:
        return type(self)(self.bucket, access_key=self.access_key, secret=self.secret)

    # ------------------------------------------------------------ keys

    def _seg(self, text: str) -> str:
        return _segment(text)

    def _unseg(self, segment: str) -> str:
        return unquote(segment)

    def _record_key(self, checkpoint_id: CheckpointID) -> str:
        return "r/" + self._seg(checkpoint_id)

    def _order_prefix(self, workflow_name: str) -> str:
        return f"o/{self._seg(workflow_name)}/"

    def _order_key(self, workflow_name: str, sequence: int) -> str:
        return f"{self._order_prefix(workflow_name)}{sequence:020d}"

    def _counter_key(self, workflow_name: str) -> str:
        return "c/" + self._seg(workflow_name)

    def _child_prefix(self, container_id: CheckpointID) -> str:
        return f"k/{self._seg(container_id)}/"

    def _child_key(self, record: CheckpointRecord) -> str:
        assert record.container_id is not None
        return f"{self._child_prefix(record.container_id)}{record.position:06d}"

    def _tomb_prefix(self, workflow_name: str) -> str:
        return f"t/{self._seg(workflow_name)}/"

    def _tomb_index_key(self, checkpoint_id: CheckpointID) -> str:
        return "i/" + self._seg(checkpoint_id)

    # ------------------------------------------------------------ requests

    @asynccontextmanager
    async def _leased(self) -> AsyncIterator[None]:
        while not await self.bucket.put(LEASE, b"", if_none_match=True):  # noqa: ASYNC110 - polls the store
            await asyncio.sleep(0.0005)
        try:
            yield
        finally:
            self.bucket.delete_now(LEASE)

    async def _written(self, work: Callable[[], Any]) -> Any:
        """Run a write whole, under the lease, in a task of its own: an object store has no
        rollback, so a caller's cancellation must not stop a write half-way (the caller still
        ends cancelled; the write lands whole, as a request that had left may)."""

        async def leased() -> Any:
            async with self._leased():
                return await work()

        return await asyncio.shield(asyncio.ensure_future(leased()))

    async def _list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        start = ""
        while True:
            page = await self.bucket.list_page(prefix, start)
            keys += page
            if len(page) < Bucket.PAGE:
                return keys
            start = page[-1]

    async def _doc(self, checkpoint_id: CheckpointID) -> dict[str, Any] | None:
        found = await self.bucket.get(self._record_key(checkpoint_id))
        return None if found is None else self._parse(checkpoint_id, found[1])

    def _parse(self, checkpoint_id: CheckpointID, data: bytes) -> dict[str, Any]:
        try:
            doc = json.loads(data)
        except ValueError as error:
            raise CheckpointCorruptedError(checkpoint_id, f"record document is not JSON: {error}") from error
        if not isinstance(doc, dict):
            raise CheckpointCorruptedError(checkpoint_id, "record document is not an object")
        return doc

    def _document(self, record: CheckpointRecord, sequence: int) -> dict[str, Any]:
        return {
            "id": record.checkpoint_id,
            "workflow": record.workflow_name,
            "previous": record.previous_checkpoint_id,
            "signature": record.graph_signature_hash,
            "container": record.container_id,
            "root": record.root_id,
            "position": record.position,
            "digest": record.digest,
            "sequence": sequence,
            "body": base64.b64encode(record.body).decode("ascii"),
        }

    @staticmethod
    def _encode(doc: Mapping[str, Any]) -> bytes:
        return json.dumps(doc).encode("utf-8")

    @staticmethod
    def _body(doc: Mapping[str, Any]) -> bytes:
        return base64.b64decode(str(doc["body"]), validate=True)

    def _record(self, doc: Mapping[str, Any]) -> CheckpointRecord:
        return CheckpointRecord(
            str(doc["id"]),
            str(doc["workflow"]),
            None if doc["previous"] is None else str(doc["previous"]),
            str(doc["signature"]),
            self._body(doc),
            str(doc["digest"]),
            None if doc["container"] is None else str(doc["container"]),
            None if doc["root"] is None else str(doc["root"]),
            int(doc["position"]),
        )

    def _stored(self, doc: Mapping[str, Any]) -> StoredBody:
        record = self._record(doc)
        return StoredBody(record.checkpoint_id, record.body, entry=record.index_entry())

    def _sequence(self, doc: Mapping[str, Any], etag: int) -> int:
        return int(doc["sequence"])

    async def _next_sequence(self, workflow_name: str) -> int:
        key = self._counter_key(workflow_name)
        while True:
            found = await self.bucket.get(key)
            if found is None:
                if await self.bucket.put(key, b"1", if_none_match=True):
                    return 1
                continue
            etag, data = found
            following = int(data) + 1
            if await self.bucket.put(key, str(following).encode(), if_match=etag):
                return following

    async def _workflow_docs(self, workflow_name: str) -> list[dict[str, Any]]:
        """Every record of the workflow (nested ones too) in ascending sequence."""
        docs: list[dict[str, Any]] = []
        for key in await self._list(self._order_prefix(workflow_name)):
            found = await self.bucket.get(key)
            if found is None:
                continue
            checkpoint_id = found[1].decode("utf-8")
            doc = await self._doc(checkpoint_id)
            if doc is None:
                raise CheckpointCorruptedError(checkpoint_id, f"order key {key!r} names a missing record")
            docs.append(doc)
        return docs

    async def _top_records(self, workflow_name: str) -> list[CheckpointRecord]:
        docs = await self._workflow_docs(workflow_name)
        return [self._record(doc) for doc in docs if doc["container"] is None]

    async def _children(self, container_id: CheckpointID) -> list[CheckpointID]:
        ids: list[CheckpointID] = []
        for key in await self._list(self._child_prefix(container_id)):
            found = await self.bucket.get(key)
            if found is not None:
                ids.append(found[1].decode("utf-8"))
        return ids

    async def _descendants(self, checkpoint_id: CheckpointID) -> list[dict[str, Any]]:
        """The documents of every record nested in one, at any depth."""
        found: list[dict[str, Any]] = []
        pending = [checkpoint_id]
        seen = {checkpoint_id}
        while pending:
            for child in await self._children(pending.pop()):
                if child in seen:
                    continue
                seen.add(child)
                doc = await self._doc(child)
                if doc is not None:
                    found.append(doc)
                    pending.append(child)
        return found

    # ------------------------------------------------------------ writes

    async def _write(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        """The one write of a save, plain or fenced (lease held)."""
        stored = await self._doc(records[0].checkpoint_id)
        if stored is not None:
            return InsertResult.of_stored_digest(str(stored["digest"]), records[0])
        for nested in records[1:]:
            if await self._doc(nested.checkpoint_id) is not None:
                raise nested_id_conflict(records, nested.checkpoint_id)
        for record in records:
            await self._put_record(record)
        return InsertResult.INSERTED

    async def _put_record(self, record: CheckpointRecord) -> None:
        sequence = await self._next_sequence(record.workflow_name)
        await self.bucket.put(
            self._record_key(record.checkpoint_id),
            self._encode(self._document(record, sequence)),
            if_none_match=True,
        )
        await self.bucket.put(
            self._order_key(record.workflow_name, sequence),
            record.checkpoint_id.encode("utf-8"),
            if_none_match=True,
        )
        if record.container_id is not None:
            await self.bucket.put(self._child_key(record), record.checkpoint_id.encode("utf-8"))

    async def _delete_doc(self, doc: Mapping[str, Any]) -> None:
        checkpoint_id = str(doc["id"])
        await self.bucket.delete(self._order_key(str(doc["workflow"]), int(doc["sequence"])))
        await self._delete_child_keys(checkpoint_id)
        await self.bucket.delete(self._record_key(checkpoint_id))

    async def _delete_child_keys(self, checkpoint_id: CheckpointID) -> None:
        for key in await self._list(self._child_prefix(checkpoint_id)):
            await self.bucket.delete(key)

    async def _remove_family(self, doc: Mapping[str, Any]) -> list[CheckpointID]:
        family = [doc, *await self._descendants(str(doc["id"]))]
        for member in family:
            await self._delete_doc(member)
        return [str(member["id"]) for member in family]

    async def _tombstone(self, workflow_name: str, ids: Sequence[CheckpointID]) -> None:
        for checkpoint_id in ids:
            await self.bucket.put(self._tomb_prefix(workflow_name) + self._seg(checkpoint_id), b"")
            await self.bucket.put(self._tomb_index_key(checkpoint_id), workflow_name.encode("utf-8"))

    async def _is_tombstone(self, checkpoint_id: CheckpointID) -> bool:
        return await self.bucket.get(self._tomb_index_key(checkpoint_id)) is not None

    # ------------------------------------------------------------ core primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result: InsertResult = await self._written(lambda: self._write(records))
        return result

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        result: FenceCheck | None = await self._written(lambda: self._fenced(records, expected_latest_id))
        return result

    async def _fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        head = latest_record(await self._top_records(records[0].workflow_name))
        latest = None if head is None else head.checkpoint_id
        stored = await self._doc(records[0].checkpoint_id)
        if stored is not None:
            return FenceCheck(latest, InsertResult.of_stored_digest(str(stored["digest"]), records[0]))
        if latest != expected_latest_id:
            return FenceCheck(latest, None)
        return FenceCheck.after_insert(latest, await self._write(records))

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        async with self._leased():
            doc = await self._doc(checkpoint_id)
        return None if doc is None else self._stored(doc)

    async def _latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        docs = {str(doc["id"]): doc for doc in await self._workflow_docs(workflow_name)}
        tops = [self._record(doc) for doc in docs.values() if doc["container"] is None]
        head = latest_record(tops, graph_signature_hash)
        if head is None:
            return None
        rivals = [self._stored(docs[rival.checkpoint_id]) for rival in rivals_of(tops, head)]
        return replace(self._stored(docs[head.checkpoint_id]), rivals=rivals)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        async with self._leased():
            return await self._latest(workflow_name, graph_signature_hash)

    def _listed(
        self, docs: Sequence[dict[str, Any]], graph_signature_hash: str | None, include_nested: bool
    ) -> list[dict[str, Any]]:
        return [
            doc
            for doc in docs
            if (include_nested or doc["container"] is None)
            and graph_signature_hash in (None, doc["signature"])
        ]

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        async with self._leased():
            docs = await self._workflow_docs(workflow_name)
        return [self._stored(doc) for doc in self._listed(docs, graph_signature_hash, include_nested)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        async with self._leased():
            docs = await self._workflow_docs(workflow_name)
        return [str(doc["id"]) for doc in self._listed(docs, graph_signature_hash, include_nested)]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        removed: bool = await self._written(lambda: self._remove(checkpoint_id))
        return removed

    async def _remove(self, checkpoint_id: CheckpointID) -> bool:
        doc = await self._doc(checkpoint_id)
        if doc is None:
            return False
        if doc["container"] is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, str(doc["container"]))
        await self._remove_family(doc)
        return True

    # ------------------------------------------------------------ nested

    async def _nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> dict[CheckpointID, bytes]:
        found: dict[CheckpointID, bytes] = {}
        for checkpoint_id in checkpoint_ids:
            for doc in await self._descendants(checkpoint_id):
                found[str(doc["id"])] = self._body(doc)
        return found

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        async with self._leased():
            return await self._nested_bodies(checkpoint_ids)

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        async with self._leased():
            if await self._doc(checkpoint_id) is None:
                return None
            return await self._children(checkpoint_id)

    # ------------------------------------------------------------ ancestry

    async def _walk_doc(self, checkpoint_id: CheckpointID) -> dict[str, Any] | None:
        return await self._doc(checkpoint_id)

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        async with self._leased():
            current: CheckpointID | None = checkpoint_id
            while current is not None and current not in links and len(links) < max_depth:
                doc = await self._walk_doc(current)
                if doc is None:
                    if current != checkpoint_id and await self._is_tombstone(current):
                        tombstones.add(current)
                    break
                previous = None if doc["previous"] is None else str(doc["previous"])
                links[current] = previous
                if with_bodies:
                    bodies[current] = self._body(doc)
                    bodies.update(await self._nested_bodies([current]))
                current = previous
        return WalkRecords(links, bodies, frozenset(tombstones))

    # ------------------------------------------------------------ retention

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        pruned: int = await self._written(lambda: self._prune(workflow_name, keep_last))
        return pruned

    async def _prune(self, workflow_name: str, keep_last: int) -> int:
        doomed = pruned_records(await self._top_records(workflow_name), keep_last)
        for record in doomed:
            doc = await self._doc(record.checkpoint_id)
            if doc is not None:
                await self._tombstone(workflow_name, await self._remove_family(doc))
        return len(doomed)

    async def _forget_tombstones(self, workflow_name: str) -> None:
        prefix = self._tomb_prefix(workflow_name)
        for key in await self._list(prefix):
            await self.bucket.delete(key)
            await self.bucket.delete(self._tomb_index_key(self._unseg(key[len(prefix) :])))

    async def delete_workflow(self, workflow_name: str) -> int:
        deleted: int = await self._written(lambda: self._delete_workflow(workflow_name))
        return deleted

    async def _delete_workflow(self, workflow_name: str) -> int:
        tops = await self._top_records(workflow_name)
        for record in tops:
            doc = await self._doc(record.checkpoint_id)
            if doc is not None:
                await self._remove_family(doc)
        await self._forget_tombstones(workflow_name)
        return len(tops)

    def _name_of_order_key(self, key: str) -> str:
        return self._unseg(key.split("/")[1])

    async def workflow_names(self) -> list[str]:
        names: set[str] = set()
        async with self._leased():
            for key in await self._list("o/"):
                found = await self.bucket.get(key)
                if found is None:
                    continue
                doc = await self._doc(found[1].decode("utf-8"))
                if doc is not None and doc["container"] is None:
                    names.add(self._name_of_order_key(key))
        return sorted(names)

    # ------------------------------------------------------------ raw access and inspect

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        written: bool = await self._written(lambda: self._overwrite(checkpoint_id, body))
        return written

    async def _overwrite(self, checkpoint_id: CheckpointID, body: bytes) -> bool:
        found = await self.bucket.get(self._record_key(checkpoint_id))
        if found is None:
            return False
        doc = self._parse(checkpoint_id, found[1])
        doc["body"] = base64.b64encode(body).decode("ascii")
        return await self.bucket.put(self._record_key(checkpoint_id), self._encode(doc), if_match=found[0])

    async def _info_of(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        found = await self.bucket.get(self._record_key(checkpoint_id))
        if found is None:
            return None
        doc = self._parse(checkpoint_id, found[1])
        return self._record(doc).info(self._sequence(doc, found[0]))

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        async with self._leased():
            return await self._info_of(checkpoint_id)

    async def _records_of(self, workflow_name: str) -> list[CheckpointInfo]:
        infos: list[CheckpointInfo] = []
        for doc in await self._workflow_docs(workflow_name):
            info = await self._info_of(str(doc["id"]))
            if info is not None:
                infos.append(info)
        return infos

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        async with self._leased():
            if workflow_name is not None:
                return await self._records_of(workflow_name)
            infos: list[CheckpointInfo] = []
            for key in await self._list("r/"):
                info = await self._info_of(self._unseg(key[2:]))
                if info is not None:
                    infos.append(info)
            return infos

    def _tombstone_id(self, segment: str) -> CheckpointID:
        return self._unseg(segment)

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        async with self._leased():
            if workflow_name is None:
                return [self._unseg(key[2:]) for key in await self._list("i/")]
            prefix = self._tomb_prefix(workflow_name)
            return [self._tombstone_id(key[len(prefix) :]) for key in await self._list(prefix)]


class ObjectStorage(CheckpointStore[ObjectBackend]):
    def __init__(self, backend: ObjectBackend, **options: Any) -> None:
        super().__init__(backend, **options)


def object_target(backend_class: type[ObjectBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: ObjectStorage(backend_class()))

    return target


# ---------------------------------------------------------------------- its broken variants


class ObjQuoteKeepsSlash(ObjectBackend):
    """Key segments are percent-encoded with ``quote``'s default ``safe="/"``: a workflow name
    holding "/" keeps it, so the order keys of workflow "a/b" are listed under workflow "a"."""

    def _seg(self, text: str) -> str:
        return quote(text)


class ObjNamesQuotePlus(ObjectBackend):
    """Key segments are encoded with ``quote_plus`` (form encoding, a space becomes "+") and decoded
    with ``unquote``: a name or id with a space comes back with a "+" wherever one is read from a
    key (workflow_names, the store-wide records, tombstones)."""

    def _seg(self, text: str) -> str:
        return quote_plus(text, safe="")


class ObjWorkflowNamesLeftQuoted(ObjectBackend):
    """workflow_names returns the workflow segment of each order key as it is in the key, without
    decoding it: a name with "/" or a space comes back percent-encoded."""

    def _name_of_order_key(self, key: str) -> str:
        return key.split("/")[1]


class ObjTombstoneIdsLeftQuoted(ObjectBackend):
    """tombstones(workflow) returns the id segment of each tombstone key without decoding it: a
    pruned id with "/", "%" or a space is listed percent-encoded."""

    def _tombstone_id(self, segment: str) -> CheckpointID:
        return segment


class ObjChildPositionUnpadded(ObjectBackend):
    """Child keys carry the position unpadded (``k/<container>/<position>``): listed in key order, a
    container's tenth child comes before its second."""

    def _child_key(self, record: CheckpointRecord) -> str:
        assert record.container_id is not None
        return f"{self._child_prefix(record.container_id)}{record.position}"


class ObjChildPrefixUnterminated(ObjectBackend):
    """A container's children are listed under the prefix ``k/<container>`` without the closing
    "/": the children of a record whose id extends another's are listed as the shorter id's too."""

    def _child_prefix(self, container_id: CheckpointID) -> str:
        return f"k/{self._seg(container_id)}"

    def _child_key(self, record: CheckpointRecord) -> str:
        assert record.container_id is not None
        return f"{self._child_prefix(record.container_id)}/{record.position:06d}"


class ObjChildKeysUnderRoot(ObjectBackend):
    """Child keys are filed under the nested record's root (the top-level checkpoint saved with
    it) instead of its container: a record nested two deep is listed as the top-level one's child,
    and its own container lists none."""

    def _child_key(self, record: CheckpointRecord) -> str:
        assert record.root_id is not None
        return f"{self._child_prefix(record.root_id)}{record.position:06d}"


class ObjRemoveLeavesChildKeys(ObjectBackend):
    """remove and prune delete a family's record documents and order keys but not the containers'
    child keys: an id saved again after its delete lists the children its first save had."""

    async def _delete_child_keys(self, checkpoint_id: CheckpointID) -> None:
        return None


class ObjTombstonePrefixUnterminated(ObjectBackend):
    """delete_workflow deletes the workflow's tombstones by the prefix ``t/<workflow>`` without the
    closing "/": the tombstones of every workflow whose name extends it go too."""

    async def _forget_tombstones(self, workflow_name: str) -> None:
        prefix = f"t/{self._seg(workflow_name)}"
        for key in await self._list(prefix):
            await self.bucket.delete(key)
            await self.bucket.delete(self._tomb_index_key(self._unseg(key.rsplit("/", 1)[1])))


class ObjDeleteWorkflowLeavesTombstoneIndex(ObjectBackend):
    """delete_workflow deletes the workflow's tombstone keys (``t/``) but not the by-id index keys
    (``i/``) walks read: a walk reaching an id the deleted workflow pruned still ends pruned."""

    async def _forget_tombstones(self, workflow_name: str) -> None:
        for key in await self._list(self._tomb_prefix(workflow_name)):
            await self.bucket.delete(key)


class ObjTombstoneOnRemove(ObjectBackend):
    """remove tombstones what it deletes, as prune does (so a walk through a deleted checkpoint
    says it was removed on purpose, not lost)."""

    async def _remove(self, checkpoint_id: CheckpointID) -> bool:
        doc = await self._doc(checkpoint_id)
        if doc is None:
            return False
        if doc["container"] is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, str(doc["container"]))
        await self._tombstone(str(doc["workflow"]), await self._remove_family(doc))
        return True


class ObjWalkKeysUnquoted(ObjectBackend):
    """walk reads each record under ``r/`` + the raw id (the walk was written apart from the other
    reads): an id holding "/", "%" or a space is not found, and the walk ends missing there."""

    async def _walk_doc(self, checkpoint_id: CheckpointID) -> dict[str, Any] | None:
        found = await self.bucket.get("r/" + checkpoint_id)
        return None if found is None else self._parse(checkpoint_id, found[1])


class ObjCompactDocuments(ObjectBackend):
    """Record documents leave out empty fields (None, "" and 0) to keep objects small and read them
    back with ``doc.get(field)``: a checkpoint whose graph signature is "" is indexed with None."""

    def _document(self, record: CheckpointRecord, sequence: int) -> dict[str, Any]:
        return {k: v for k, v in super()._document(record, sequence).items() if v}

    def _record(self, doc: Mapping[str, Any]) -> CheckpointRecord:
        return CheckpointRecord(
            str(doc["id"]),
            str(doc["workflow"]),
            doc.get("previous"),
            doc.get("signature"),  # type: ignore[arg-type]
            self._body(doc),
            str(doc.get("digest", "")),
            doc.get("container"),
            doc.get("root"),
            int(doc.get("position", 0)),
        )

    def _listed(
        self, docs: Sequence[dict[str, Any]], graph_signature_hash: str | None, include_nested: bool
    ) -> list[dict[str, Any]]:
        return [
            doc
            for doc in docs
            if (include_nested or doc.get("container") is None)
            and graph_signature_hash in (None, doc.get("signature"))
        ]

    async def _workflow_docs(self, workflow_name: str) -> list[dict[str, Any]]:
        docs = await super()._workflow_docs(workflow_name)
        for doc in docs:
            doc.setdefault("container", None)
            doc.setdefault("previous", None)
        return docs

    async def _doc(self, checkpoint_id: CheckpointID) -> dict[str, Any] | None:
        doc = await super()._doc(checkpoint_id)
        if doc is not None:
            for field in ("container", "previous", "root"):
                doc.setdefault(field, None)
            doc.setdefault("digest", "")
            doc.setdefault("position", 0)
        return doc


class ObjNestedIdsMissingAsEmpty(ObjectBackend):
    """nested_ids lists the child keys under the id without reading the record: an id that is not
    stored has no children, [] instead of None."""

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        async with self._leased():
            return await self._children(checkpoint_id)


class ObjNestedBodiesDirectOnly(ObjectBackend):
    """nested_bodies reads the child keys of each given record, one level: the bodies of records
    nested two deep are not returned."""

    async def _nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> dict[CheckpointID, bytes]:
        found: dict[CheckpointID, bytes] = {}
        for checkpoint_id in checkpoint_ids:
            for child in await self._children(checkpoint_id):
                doc = await self._doc(child)
                if doc is not None:
                    found[child] = self._body(doc)
        return found


class ObjRecordsLeaveNestedOut(ObjectBackend):
    """records(workflow) lists the workflow's top-level records only (the listing helper's
    default); the store-wide records() lists every record."""

    async def _records_of(self, workflow_name: str) -> list[CheckpointInfo]:
        return [info for info in await super()._records_of(workflow_name) if info.container_id is None]


class ObjSequenceFromEtag(ObjectBackend):
    """info and records report each record's sequence as its document's etag (the store's version
    counter, increasing with every write), not the number the workflow's counter gave it."""

    def _sequence(self, doc: Mapping[str, Any], etag: int) -> int:
        return etag


class ObjDescribeShowsSecret(ObjectBackend):
    """describe() names the bucket with the credentials the backend was given
    (``objmem://ACCESS:SECRET@bucket``), as its connection string does."""

    def describe(self) -> str:
        return f"objmem://{self.access_key}:{self.secret}@bucket"


class ObjNestedCheckedAfterContainer(ObjectBackend):
    """A save puts the container's objects first, then each nested record's with a create-only put,
    and reports a nested id found stored by that put's refusal: the container is stored by then."""

    async def _write(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        stored = await self._doc(records[0].checkpoint_id)
        if stored is not None:
            return InsertResult.of_stored_digest(str(stored["digest"]), records[0])
        await self._put_record(records[0])
        for nested in records[1:]:
            if await self._doc(nested.checkpoint_id) is not None:
                raise nested_id_conflict(records, nested.checkpoint_id)
            await self._put_record(nested)
        return InsertResult.INSERTED


class ObjLeaseKeptOnError(ObjectBackend):
    """The lease is deleted when a primitive returns (no try/finally): a primitive that raises (a
    nested id already stored, a nested record's delete refused) leaves the lease, and every later
    call waits for it."""

    @asynccontextmanager
    async def _leased(self) -> AsyncIterator[None]:
        while not await self.bucket.put(LEASE, b"", if_none_match=True):  # noqa: ASYNC110 - polls the store
            await asyncio.sleep(0.0005)
        yield
        self.bucket.delete_now(LEASE)


class ObjLatestWithoutLease(ObjectBackend):
    """latest reads without the lease (a read needs no lock): a record removed between its order
    key's listing and its document's read is reported as corrupted."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self._latest(workflow_name, graph_signature_hash)


class ObjRemoveOrderKeyFromCounter(ObjectBackend):
    """remove deletes the order key of the workflow's counter value (the newest number) instead of
    the record's own sequence: removing any but the newest record leaves its order key behind and
    takes the newest one's."""

    async def _delete_doc(self, doc: Mapping[str, Any]) -> None:
        workflow_name = str(doc["workflow"])
        found = await self.bucket.get(self._counter_key(workflow_name))
        newest = int(found[1]) if found is not None else int(doc["sequence"])
        await self.bucket.delete(self._order_key(workflow_name, newest))
        await self._delete_child_keys(str(doc["id"]))
        await self.bucket.delete(self._record_key(str(doc["id"])))


class ObjDocumentCachePerHandle(ObjectBackend):
    """load keeps the documents it read per handle (a record is immutable, so a document never
    changes), dropped by this handle's remove and overwrite_body only."""

    def __init__(self, bucket: Bucket | None = None, **options: Any) -> None:
        super().__init__(bucket, **options)
        self.cache: dict[CheckpointID, StoredBody] = {}

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        if checkpoint_id in self.cache:
            return self.cache[checkpoint_id]
        found = await super().load(checkpoint_id)
        if found is not None:
            self.cache[checkpoint_id] = found
        return found

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        self.cache.pop(checkpoint_id, None)
        return await super().remove(checkpoint_id)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        self.cache.pop(checkpoint_id, None)
        return await super().overwrite_body(checkpoint_id, body, digest)


class ObjListContinuesFromPageStart(ObjectBackend):
    """A listing longer than a page continues after the first key of the page it read, not the
    last (the start key is taken from the wrong end): pages overlap and keys repeat."""

    async def _list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        start = ""
        while True:
            page = await self.bucket.list_page(prefix, start)
            keys += page
            if len(page) < Bucket.PAGE:
                return keys
            start = page[0]


class ObjOrderValuesLatin1(ObjectBackend):
    """Order keys hold the record's id as bytes written as UTF-8 and read back as Latin-1
    (``bytes.decode("latin-1")`` never fails): an id beyond ASCII is looked up altered by the
    listings."""

    async def _workflow_docs(self, workflow_name: str) -> list[dict[str, Any]]:
        docs: list[dict[str, Any]] = []
        for key in await self._list(self._order_prefix(workflow_name)):
            found = await self.bucket.get(key)
            if found is None:
                continue
            checkpoint_id = found[1].decode("latin-1")
            doc = await self._doc(checkpoint_id)
            if doc is None:
                raise CheckpointCorruptedError(checkpoint_id, f"order key {key!r} names a missing record")
            docs.append(doc)
        return docs


# ====================================================================== wrappers over memory


class MemoryWrapper:
    """Delegates every operation to a built-in in-memory storage; subclasses add one layer.
    ``shared`` is what every handle of one store shares (a breaker's state, a cache)."""

    def __init__(self, inner: Any, shared: dict[str, Any] | None = None) -> None:
        self.inner = inner
        self.shared: dict[str, Any] = shared if shared is not None else {}

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset(self.inner.capabilities)

    def new_handle(self) -> Any:
        return type(self)(self.inner.new_handle(), self.shared)

    def with_integrity_key(self, integrity_key: Any) -> Any:
        return type(self)(self.inner.with_integrity_key(integrity_key), self.shared)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _call(self, operation: str, call: Callable[[], Any]) -> Any:
        return await call()

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        return str(await self._call("save", lambda: self.inner.save(checkpoint, **options)))

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        return await self._call("load", lambda: self.inner.load(checkpoint_id, **options))

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any:
        return await self._call(
            "get_latest", lambda: self.inner.get_latest(workflow_name=workflow_name, **options)
        )

    async def list_checkpoints(self, *, workflow_name: str, **options: Any) -> list[Any]:
        return list(
            await self._call(
                "list_checkpoints",
                lambda: self.inner.list_checkpoints(workflow_name=workflow_name, **options),
            )
        )

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[CheckpointID]:
        return list(
            await self._call(
                "list_checkpoint_ids",
                lambda: self.inner.list_checkpoint_ids(workflow_name=workflow_name, **options),
            )
        )

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return bool(await self._call("delete", lambda: self.inner.delete(checkpoint_id)))


def wrapped(wrapper_class: type[MemoryWrapper]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(wrapper_class.__name__, lambda: wrapper_class(InMemoryCheckpointStorage()))

    return target


class _Breaker:
    """A circuit breaker's state: consecutive failures and when it opened."""

    def __init__(self) -> None:
        self.failures = 0
        self.opened_at: float | None = None


class BreakerCountsDomainErrors(MemoryWrapper):
    """A circuit breaker (shared by the store's handles) opens for 30 s after 5 failed calls in a
    row, refusing calls with StorageUnavailableError; it counts every exception a call raises,
    CheckpointNotFoundError and conflicts included."""

    THRESHOLD = 5

    def _counts(self, error: BaseException) -> bool:
        return isinstance(error, Exception)

    async def _call(self, operation: str, call: Callable[[], Any]) -> Any:
        breaker: _Breaker = self.shared.setdefault("breaker", _Breaker())
        if breaker.opened_at is not None and time.monotonic() - breaker.opened_at < 30:
            raise StorageUnavailableError(operation, "circuit open after repeated failures")
        try:
            result = await call()
        except BaseException as error:
            if self._counts(error):
                breaker.failures += 1
                if breaker.failures >= self.THRESHOLD:
                    breaker.opened_at = time.monotonic()
            raise
        breaker.failures = 0
        breaker.opened_at = None
        return result


class BreakerCountsCancellations(BreakerCountsDomainErrors):
    """A circuit breaker (shared by the store's handles) opens for 30 s after 5 failed calls in a
    row; it counts StorageUnavailableError and calls that ended cancelled or timed out (a slow
    backend is a failing one)."""

    def _counts(self, error: BaseException) -> bool:
        return isinstance(error, (StorageUnavailableError, asyncio.CancelledError, TimeoutError))


class RateLimitSleepsOnLoop(MemoryWrapper):
    """A token-bucket rate limiter (200 calls a second, bursts of 50, shared by the store's
    handles) waits for a token with time.sleep (the limiter came from synchronous code)."""

    RATE = 200.0
    BURST = 50.0

    async def _call(self, operation: str, call: Callable[[], Any]) -> Any:
        bucket = self.shared.setdefault("tokens", [self.BURST, time.monotonic()])
        now = time.monotonic()
        bucket[0] = min(self.BURST, bucket[0] + (now - bucket[1]) * self.RATE)
        bucket[1] = now
        if bucket[0] < 1:
            time.sleep((1 - bucket[0]) / self.RATE)  # noqa: ASYNC251 - the defect
            bucket[0] = 1.0
            bucket[1] = time.monotonic()
        bucket[0] -= 1
        return await call()


class FenceRebasedOnStale(MemoryWrapper):
    """A fenced save refused as stale is retried once against the head the refusal names (the
    writer "rebases" onto what it missed), as an optimistic-concurrency retry does."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        try:
            return await super().save(checkpoint, **options)
        except StaleWriterError as error:
            if "expected_latest_id" not in options:
                raise
            return await super().save(checkpoint, **{**options, "expected_latest_id": error.actual_latest_id})


class ConflictWithSameTimestampIsRetry(MemoryWrapper):
    """A retry layer reads a save's CheckpointConflictError as "an earlier attempt of this save
    landed" when the stored checkpoint has the same workflow and timestamp, and returns the id."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        try:
            return await super().save(checkpoint, **options)
        except StaleWriterError:
            raise
        except CheckpointConflictError:
            stored = await self.inner.load(checkpoint.checkpoint_id)
            if stored.workflow_name == checkpoint.workflow_name and stored.timestamp == checkpoint.timestamp:
                return str(checkpoint.checkpoint_id)
            raise


class _SigningKeyOnce:
    """A key provider that asks the provider it wraps for the signing key once and keeps it (a
    secret manager costs a request)."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.signing: tuple[str, bytes] | None = None

    def signing_key(self) -> tuple[str, bytes]:
        if self.signing is None:
            self.signing = self.provider.signing_key()
        return self.signing

    def verifying_key(self, key_id: str) -> bytes | None:
        key: bytes | None = self.provider.verifying_key(key_id)
        return key


class SigningKeyCachedFromProvider(MemoryWrapper):
    """with_integrity_key puts a key provider behind a cache that asks it for the signing key once:
    a provider that rotates live keeps signing with the key it first gave."""

    def with_integrity_key(self, integrity_key: Any) -> Any:
        if integrity_key is not None and not isinstance(integrity_key, (bytes, bytearray)):
            integrity_key = _SigningKeyOnce(integrity_key)
        return super().with_integrity_key(integrity_key)


class KeylessHandleKeepsKey(MemoryWrapper):
    """with_integrity_key(None) keeps the handle's current key (``key or current``: "no key given"
    read as "keep the one I have"), so a keyed handle cannot give a keyless one."""

    def __init__(self, inner: Any, shared: dict[str, Any] | None = None, key: Any = None) -> None:
        super().__init__(inner, shared)
        self.key = key

    def new_handle(self) -> Any:
        return type(self)(self.inner.new_handle(), self.shared, self.key)

    def with_integrity_key(self, integrity_key: Any) -> Any:
        key = integrity_key or self.key
        return type(self)(self.inner.with_integrity_key(key), self.shared, key)


class WithKeyRekeysInPlace(MemoryWrapper):
    """with_integrity_key configures the key on the storage it wraps and returns the wrapper itself
    (one object per store), so every holder of it is keyed from then on."""

    def with_integrity_key(self, integrity_key: Any) -> Any:
        self.inner.configure_integrity(integrity_key)
        return self


class LoadDropsAnchor(MemoryWrapper):
    """load forwards expected_graph_signature_hash only (the option MAF knows): ``anchor=`` is
    accepted and dropped, while get_latest forwards every option."""

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        kept = {k: v for k, v in options.items() if k == "expected_graph_signature_hash"}
        return await super().load(checkpoint_id, **kept)


class HeadAnchorCachedBriefly(MemoryWrapper):
    """head_anchor is cached per workflow for 2 s (shared by the store's handles): an anchor asked
    for right after a save may name the head before it."""

    async def head_anchor(self, *, workflow_name: str) -> str:
        cache: dict[str, tuple[float, str]] = self.shared.setdefault("anchors", {})
        found = cache.get(workflow_name)
        if found is not None and time.monotonic() - found[0] < 2.0:
            return found[1]
        anchor = str(await self.inner.head_anchor(workflow_name=workflow_name))
        cache[workflow_name] = (time.monotonic(), anchor)
        return anchor


class LatestCacheSharedAcrossKeys(MemoryWrapper):
    """get_latest answers are cached per (workflow, signature) for every handle of the store,
    keyed and keyless alike, and dropped by any write through any of them: a keyed handle can be
    answered with what a keyless one read."""

    def _cache(self) -> dict[tuple[str, str | None], Any]:
        cache: dict[tuple[str, str | None], Any] = self.shared.setdefault("latest", {})
        return cache

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any:
        key = (workflow_name, options.get("graph_signature_hash"))
        if set(options) <= {"graph_signature_hash"} and key in self._cache():
            return await self.inner.load(self._cache()[key]) if self._cache()[key] else None
        found = await super().get_latest(workflow_name=workflow_name, **options)
        self._cache()[key] = None if found is None else found.checkpoint_id
        return found

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        self._cache().clear()
        try:
            return await super().save(checkpoint, **options)
        finally:
            self._cache().clear()

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        try:
            return await super().delete(checkpoint_id)
        finally:
            self._cache().clear()

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        try:
            return int(await self.inner.prune(workflow_name=workflow_name, keep_last=keep_last))
        finally:
            self._cache().clear()

    async def delete_workflow(self, *, workflow_name: str) -> int:
        try:
            return int(await self.inner.delete_workflow(workflow_name=workflow_name))
        finally:
            self._cache().clear()

    async def write_raw_body(self, checkpoint_id: CheckpointID, body: bytes) -> None:
        try:
            await self.inner.write_raw_body(checkpoint_id, body)
        finally:
            self._cache().clear()


class TimeoutPerCall(MemoryWrapper):
    """Every call is bounded by ``asyncio.wait_for(call, 30)`` so that a hung backend cannot stall
    a runner (on Python 3.11, wait_for returns the call's result when the caller's cancellation
    arrives as the call finishes)."""

    async def _call(self, operation: str, call: Callable[[], Any]) -> Any:
        return await asyncio.wait_for(call(), 30)


# ====================================================================== six methods, pydantic rows


class Row(BaseModel):
    """One stored checkpoint: the fields the latest rule reads, its number and its codec body."""

    model_config = ConfigDict(frozen=True)

    checkpoint_id: str
    workflow_name: str
    previous_checkpoint_id: str | None
    graph_signature_hash: str
    timestamp: str
    sequence: int
    body: bytes


class SixPydanticRows:
    """MAF's six methods over a dict of pydantic rows, one per checkpoint, each holding the body the
    storage's codec encoded at save; get_latest applies the documented rule with
    ``storages.backend``'s latest_record, rivals_of and resume_point."""

    row_class: type[Row] = Row

    def __init__(self) -> None:
        self.codec = CheckpointCodec(trust_saved_types=True)
        self.rows: dict[str, Row] = {}
        self.counter = 0
        self.lock = threading.Lock()

    def _encode(self, checkpoint: Any) -> bytes:
        return self.codec.encode_checkpoint(checkpoint)

    def _decode(self, row: Row) -> Any:
        return self.codec.decode_checkpoint(row.body, checkpoint_id=row.checkpoint_id)

    def _row(self, checkpoint: Any, body: bytes, sequence: int) -> Row:
        return self.row_class(
            checkpoint_id=checkpoint.checkpoint_id,
            workflow_name=checkpoint.workflow_name,
            previous_checkpoint_id=checkpoint.previous_checkpoint_id,
            graph_signature_hash=checkpoint.graph_signature_hash,
            timestamp=checkpoint.timestamp,
            sequence=sequence,
            body=body,
        )

    def _same(self, stored: Row, checkpoint: Any, body: bytes) -> bool:
        if stored.body == body:
            return True
        return self.codec.same_value(self._decode(stored), checkpoint)

    @staticmethod
    def _check_ids(checkpoint: Any) -> None:
        validate_identifier(checkpoint.checkpoint_id, "checkpoint_id")
        validate_identifier(checkpoint.workflow_name, "workflow_name")
        if checkpoint.previous_checkpoint_id is not None:
            validate_identifier(checkpoint.previous_checkpoint_id, "previous_checkpoint_id")

    async def save(self, checkpoint: Any) -> CheckpointID:
        self._check_ids(checkpoint)
        body = self._encode(checkpoint)
        with self.lock:
            stored = self.rows.get(checkpoint.checkpoint_id)
            if stored is None:
                self.counter += 1
                row = self._row(checkpoint, body, self.counter)
                self.rows[row.checkpoint_id] = row
                return row.checkpoint_id
        if self._same(stored, checkpoint, body):
            return stored.checkpoint_id
        raise CheckpointConflictError(checkpoint.checkpoint_id)

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        validate_identifier(checkpoint_id, "checkpoint_id")
        with self.lock:
            row = self.rows.get(checkpoint_id)
        if row is None:
            raise CheckpointNotFoundError(checkpoint_id)
        return self._decode(row)

    def _workflow_rows(self, workflow_name: str) -> list[Row]:
        validate_identifier(workflow_name, "workflow_name")
        with self.lock:
            rows = [row for row in self.rows.values() if row.workflow_name == workflow_name]
        return sorted(rows, key=lambda row: row.sequence)

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        return [self._decode(row) for row in self._workflow_rows(workflow_name)]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        return [row.checkpoint_id for row in self._workflow_rows(workflow_name)]

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        validate_identifier(checkpoint_id, "checkpoint_id")
        with self.lock:
            return self.rows.pop(checkpoint_id, None) is not None

    def _resume_from(self, head: Row, rivals: list[Row]) -> Row:
        return resume_point([*rivals, head])

    async def get_latest(self, *, workflow_name: str) -> Any:
        rows = self._workflow_rows(workflow_name)
        head = latest_record(rows)
        if head is None:
            return None
        return self._decode(self._resume_from(head, rivals_of(rows, head)))


def six(six_class: type[SixPydanticRows]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(six_class.__name__, six_class)

    return target


class TimestampRow(Row):
    timestamp: datetime  # type: ignore[assignment]


class SixRowTimestampAsDatetime(SixPydanticRows):
    """The row's timestamp is typed ``datetime`` (pydantic parses the ISO string, so the rivals
    compare as instants): a checkpoint whose timestamp does not parse cannot be saved."""

    row_class = TimestampRow

    def _resume_from(self, head: Row, rivals: list[Row]) -> Row:
        return max([*rivals, head], key=lambda row: (row.timestamp, row.sequence))


class StrippedRow(Row):
    model_config = ConfigDict(frozen=True, str_strip_whitespace=True)


class SixRowConfigStripsStrings(SixPydanticRows):
    """The row model strips whitespace from its strings (``str_strip_whitespace``, set for the
    names): ids and names with surrounding spaces are stored, and found, stripped."""

    row_class = StrippedRow

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        return await super().load(checkpoint_id.strip())

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return await super().delete(checkpoint_id.strip())

    def _workflow_rows(self, workflow_name: str) -> list[Row]:
        return super()._workflow_rows(workflow_name.strip())

    async def save(self, checkpoint: Any) -> CheckpointID:
        await super().save(checkpoint)
        return str(checkpoint.checkpoint_id)


class SixConvertsToMafClass(SixPydanticRows):
    """Every checkpoint is stored as MAF's own WorkflowCheckpoint (one class in the store, the one
    the runner uses), so one saved as storages.WorkflowCheckpoint loads as MAF's."""

    def _encode(self, checkpoint: Any) -> bytes:
        from agent_framework import WorkflowCheckpoint as MafCheckpoint

        if not isinstance(checkpoint, MafCheckpoint):
            checkpoint = MafCheckpoint(
                workflow_name=checkpoint.workflow_name,
                graph_signature_hash=checkpoint.graph_signature_hash,
                checkpoint_id=checkpoint.checkpoint_id,
                previous_checkpoint_id=checkpoint.previous_checkpoint_id,
                timestamp=checkpoint.timestamp,
                messages=checkpoint.messages,
                state=checkpoint.state,
                pending_request_info_events=checkpoint.pending_request_info_events,
                iteration_count=checkpoint.iteration_count,
                metadata=checkpoint.metadata,
                version=checkpoint.version,
            )
        return super()._encode(checkpoint)


class SixResaveComparesIndexFields(SixPydanticRows):
    """A re-save is the same checkpoint when its row fields match the stored row's (workflow,
    previous id, signature, timestamp): the body is not compared."""

    def _same(self, stored: Row, checkpoint: Any, body: bytes) -> bool:
        return bool(
            stored.workflow_name == checkpoint.workflow_name
            and stored.previous_checkpoint_id == checkpoint.previous_checkpoint_id
            and stored.graph_signature_hash == checkpoint.graph_signature_hash
            and stored.timestamp == checkpoint.timestamp
        )


class SixResaveComparesBytes(SixPydanticRows):
    """A re-save is the same checkpoint only when its body is byte for byte the stored one (the
    codec is deterministic, after all); otherwise it conflicts."""

    def _same(self, stored: Row, checkpoint: Any, body: bytes) -> bool:
        return stored.body == body


class SixResumePointHeadFirst(SixPydanticRows):
    """get_latest passes the head first, then its rivals, to resume_point (the head is the
    candidate it starts from), so among equal timestamps the wrong one wins."""

    def _resume_from(self, head: Row, rivals: list[Row]) -> Row:
        return resume_point([head, *rivals])


class SixRivalsByTimestampText(SixPydanticRows):
    """get_latest picks, among the head and its rivals, the greatest timestamp string (ISO 8601
    sorts as text), the one committed last among equals."""

    def _resume_from(self, head: Row, rivals: list[Row]) -> Row:
        return max([*rivals, head], key=lambda row: (row.timestamp, row.sequence))


class SixLoadsWithFreshCodec(SixPydanticRows):
    """Bodies are decoded with a new default codec per read (decoding needs no state), not the
    storage's own: a type the storage's codec allows is refused on load."""

    def _decode(self, row: Row) -> Any:
        return CheckpointCodec().decode_checkpoint(row.body, checkpoint_id=row.checkpoint_id)


class SixPreviousIdNotChecked(SixPydanticRows):
    """save checks the checkpoint's id and workflow name against the identifier rules but not its
    previous id (a link, not a key of the store)."""

    @staticmethod
    def _check_ids(checkpoint: Any) -> None:
        validate_identifier(checkpoint.checkpoint_id, "checkpoint_id")
        validate_identifier(checkpoint.workflow_name, "workflow_name")


# ====================================================================== the batch

Entry = tuple[str, Callable[[], StorageTarget], str]


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


def _entries() -> list[Entry]:
    broken_objects: list[type[ObjectBackend]] = [
        ObjQuoteKeepsSlash,
        ObjNamesQuotePlus,
        ObjWorkflowNamesLeftQuoted,
        ObjTombstoneIdsLeftQuoted,
        ObjChildPositionUnpadded,
        ObjChildPrefixUnterminated,
        ObjChildKeysUnderRoot,
        ObjRemoveLeavesChildKeys,
        ObjTombstonePrefixUnterminated,
        ObjDeleteWorkflowLeavesTombstoneIndex,
        ObjTombstoneOnRemove,
        ObjWalkKeysUnquoted,
        ObjCompactDocuments,
        ObjNestedIdsMissingAsEmpty,
        ObjNestedBodiesDirectOnly,
        ObjRecordsLeaveNestedOut,
        ObjSequenceFromEtag,
        ObjDescribeShowsSecret,
        ObjNestedCheckedAfterContainer,
        ObjLeaseKeptOnError,
        ObjLatestWithoutLease,
        ObjRemoveOrderKeyFromCounter,
        ObjDocumentCachePerHandle,
        ObjListContinuesFromPageStart,
        ObjOrderValuesLatin1,
    ]
    broken_wrappers: list[type[MemoryWrapper]] = [
        BreakerCountsDomainErrors,
        RateLimitSleepsOnLoop,
        FenceRebasedOnStale,
        ConflictWithSameTimestampIsRetry,
        SigningKeyCachedFromProvider,
        KeylessHandleKeepsKey,
        WithKeyRekeysInPlace,
        LoadDropsAnchor,
        HeadAnchorCachedBriefly,
        TimeoutPerCall,
    ]
    broken_six: list[type[SixPydanticRows]] = [
        SixRowTimestampAsDatetime,
        SixRowConfigStripsStrings,
        SixConvertsToMafClass,
        SixResaveComparesIndexFields,
        SixResaveComparesBytes,
        SixResumePointHeadFirst,
        SixRivalsByTimestampText,
        SixLoadsWithFreshCodec,
        SixPreviousIdNotChecked,
    ]
    entries: list[Entry] = []
    entries += [(c.__name__, object_target(c), _doc(c)) for c in broken_objects]
    entries += [(c.__name__, wrapped(c), _doc(c)) for c in broken_wrappers]
    entries += [(c.__name__, six(c), _doc(c)) for c in broken_six]
    return entries


ENTRIES: list[Entry] = _entries()
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = [
    # Over the in-memory storage no call suspends, so no call is ever cancelled part-way: the
    # breaker never counts a cancellation, and the store is never refused.
    ("BreakerCountsCancellations", wrapped(BreakerCountsCancellations), _doc(BreakerCountsCancellations)),
    # A keyed handle's cache hit is a keyed load of the cached id (verified as any load), and a
    # write through any handle drops the cache: no answer differs from an uncached one.
    ("LatestCacheSharedAcrossKeys", wrapped(LatestCacheSharedAcrossKeys), _doc(LatestCacheSharedAcrossKeys)),
]
"""Written as broken, judged not to break the contract as built (tests/kit/blind_batch_seven.md
says why); each must pass the whole kit."""

HONEST: list[Entry] = [
    ("ObjectBackend", object_target(ObjectBackend), _doc(ObjectBackend)),
    ("MemoryWrapper", wrapped(MemoryWrapper), _doc(MemoryWrapper)),
    ("SixPydanticRows", six(SixPydanticRows), _doc(SixPydanticRows)),
]
"""Honest storages, one per style: each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
