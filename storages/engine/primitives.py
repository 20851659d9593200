"""The storage primitives a backend implements, and which capability needs which.

:data:`CAPABILITY_PRIMITIVES` is the one table saying so. A class declaring a capability without
its primitives fails when the class is created, with a TypeError naming both; a primitive that is
called but not implemented raises :class:`MissingPrimitiveError` naming itself and the capability
that needs it. docs/backends.md describes each primitive's duties.

A backend names its driver's exception types in :attr:`StoragePrimitives.driver_errors`: any of
them escaping a primitive becomes StorageUnavailableError naming the operation (the engine does
the translation every backend used to write by hand; ``_driver_error`` refines it).
"""

from __future__ import annotations

import abc
import contextvars
import functools
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

from ..contract import Capability, CheckpointID, CheckpointInfo
from ..errors import StorageUnavailableError
from ..redaction import chainable
from .records import CheckpointRecord, FenceCheck, StoredBody, WalkRecords

CORE_PRIMITIVES: tuple[str, ...] = ("_get", "_latest", "_list", "_list_ids", "_remove")
"""Every backend implements these, plus ``_insert`` or ``_insert_family`` (or both)."""

CAPABILITY_PRIMITIVES: Mapping[Capability, tuple[str, ...]] = MappingProxyType(
    {
        Capability.SIGNATURE_FILTER: (),  # the core reads honour their graph_signature_hash argument
        Capability.ANCESTRY: ("_walk",),
        Capability.NESTED: ("_insert_family", "_nested_bodies", "_nested_ids"),
        Capability.PRUNE: ("_prune", "_delete_workflow"),
        Capability.TTL: (),  # a property of the backend's records; the kit reads ``ttl``
        Capability.LIST_WORKFLOWS: ("_workflow_names",),
        Capability.RAW_ACCESS: ("_overwrite_body",),  # reads go through the core ``_get``
        Capability.INSPECT: ("_info", "_records", "_tombstones"),
        Capability.FENCING: ("_insert_fenced",),
        Capability.PENDING_WRITES: (),  # the engine keeps the log with the core primitives
        Capability.DURABLE: (),
        Capability.SHARED: (),
    }
)
"""Capability -> the primitives (beyond the core ones) a class declaring it must implement."""

OPTIONAL_HOOKS: tuple[str, ...] = ("_load", "_open", "_close", "_follow_loop")
"""Primitives with a working default a backend may override (one-round-trip loads, connections)."""

_current_operation: contextvars.ContextVar[str] = contextvars.ContextVar("storage_operation")
"""The public operation the running task is in (set by the engine before it calls primitives)."""


set_current_operation: Callable[[str], object] = _current_operation.set
"""Name the public operation the running task is in: the ContextVar's own setter, so the call
every operation makes runs no Python frame."""


def current_operation(default: str = "open") -> str:
    """The public operation the running task is in, for a backend's messages (a failed connect
    names the operation that needed it)."""
    return _current_operation.get(default)


def capabilities_needing(primitive: str) -> list[Capability]:
    """The capabilities whose table row names ``primitive``."""
    return [capability for capability, names in CAPABILITY_PRIMITIVES.items() if primitive in names]


class MissingPrimitiveError(NotImplementedError):
    """A primitive was called that the storage class does not implement."""

    def __init__(self, storage_class: type[Any], primitive: str) -> None:
        needing = capabilities_needing(primitive)
        if needing:
            why = "capability " + " and ".join(repr(c.value) for c in needing) + " needs it"
        else:
            why = "every storage needs it"
        super().__init__(
            f"{storage_class.__qualname__}.{primitive} is not implemented: {why} "
            "(docs/backends.md lists each primitive's duties)"
        )
        self.storage_class = storage_class
        self.primitive = primitive
        self.capabilities = needing


def implements(cls: type[Any], primitive: str) -> bool:
    """True when ``cls`` (or a base below the engine) overrides the engine's default."""
    resolved = getattr(cls, primitive, None)
    default = getattr(StoragePrimitives, primitive)
    return resolved is not None and _unwrapped(resolved) is not _unwrapped(default)


def implemented_capabilities(cls: type[Any]) -> frozenset[Capability]:
    """The capabilities whose primitives ``cls`` implements (the kit's table shows the same)."""
    return frozenset(
        capability
        for capability, names in CAPABILITY_PRIMITIVES.items()
        if names and all(implements(cls, name) for name in names)
    )


def missing_primitives(cls: type[Any]) -> dict[Capability, list[str]]:
    """Declared capability -> the primitives of it that ``cls`` lacks (empty when it is whole)."""
    declared = cls.__dict__.get("capabilities", getattr(cls, "capabilities", ()))
    if not isinstance(declared, (set, frozenset, list, tuple)):
        return {}  # a property or an instance attribute: checked by the kit, not here
    missing: dict[Capability, list[str]] = {}
    for capability in declared:
        if not isinstance(capability, Capability):
            continue  # the kit's capabilities.declared_members clause reports strays
        lacking = [name for name in CAPABILITY_PRIMITIVES[capability] if not implements(cls, name)]
        if lacking:
            missing[capability] = lacking
    return missing


def is_concrete(cls: type[Any]) -> bool:
    return not any(
        getattr(getattr(cls, name, None), "__isabstractmethod__", False) for name in CORE_PRIMITIVES
    )


def check_primitives(cls: type[Any]) -> None:
    """Raise TypeError if a concrete storage class lacks a primitive it needs."""
    if not is_concrete(cls):
        return
    if not (implements(cls, "_insert") or implements(cls, "_insert_family")):
        raise TypeError(
            f"{cls.__qualname__} implements neither _insert nor _insert_family: a storage needs one "
            "of them to save (docs/backends.md)"
        )
    missing = missing_primitives(cls)
    if missing:
        rows = "; ".join(f"{c.value!r} needs {', '.join(names)}" for c, names in missing.items())
        raise TypeError(
            f"{cls.__qualname__} declares capabilities whose primitives it does not implement: {rows} "
            "(implement them or leave the capability out; docs/backends.md)"
        )


_TRANSLATED = "_translates_driver_errors"
_LIFECYCLE_OPERATIONS = {"_open": "open", "_close": "aclose"}
"""Hooks that run for whichever operation comes first (or for aclose) are named by themselves."""


def _unwrapped(function: Any) -> Any:
    return getattr(function, "__wrapped__", function) if getattr(function, _TRANSLATED, False) else function


def translate_driver_errors(cls: type[Any]) -> None:
    """Wrap every async primitive ``cls`` implements so that ``cls.driver_errors`` escaping it
    become the error ``_driver_error`` builds (StorageUnavailableError naming the operation)."""
    if not cls.driver_errors:
        return
    for name in (*CORE_PRIMITIVES, "_insert", *_EXTENSION_PRIMITIVES, *OPTIONAL_HOOKS):
        function = getattr(cls, name)
        if getattr(function, _TRANSLATED, False) or not implements(cls, name):
            continue
        setattr(cls, name, _translating(name, function))


def _translating(
    name: str, primitive: Callable[..., Coroutine[Any, Any, Any]]
) -> Callable[..., Coroutine[Any, Any, Any]]:
    fixed_operation = _LIFECYCLE_OPERATIONS.get(name)

    @functools.wraps(primitive)
    async def translating(self: StoragePrimitives, *args: Any, **kwargs: Any) -> Any:
        try:
            return await primitive(self, *args, **kwargs)
        except self.driver_errors as exc:
            operation = fixed_operation or _current_operation.get(name.lstrip("_"))
            # chainable: a driver message quoting a URL with its password is not chained.
            raise self._driver_error(operation, exc) from chainable(exc)

    setattr(translating, _TRANSLATED, True)
    return translating


class StoragePrimitives(abc.ABC):
    """The primitives, as the engine calls them. Each must be atomic on its backend (one round
    trip where the backend allows); the engine adds no locking of its own."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    """What this backend supports; see :class:`~storages.contract.Capability` and
    :data:`CAPABILITY_PRIMITIVES` (checked when the class is created)."""

    driver_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    """The driver's exception types that mean "the backend could not be reached or failed"."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_primitives(cls)
        translate_driver_errors(cls)

    def describe(self) -> str:
        """A short human name for messages and reports, e.g. ``sqlite:///path.db``."""
        return type(self).__name__

    def _driver_error(self, operation: str, exc: BaseException) -> Exception:
        """The error a driver exception from ``driver_errors`` becomes; override to refine it."""
        return StorageUnavailableError(operation, f"{self.describe()}: {type(exc).__name__}: {exc}")

    def _missing(self, primitive: str) -> MissingPrimitiveError:
        return MissingPrimitiveError(type(self), primitive)

    # ------------------------------------------------------------------ lifecycle hooks

    async def _open(self) -> None:  # noqa: B027 - optional hook
        """Connect and prepare the backend; called once, lazily, before the first operation."""

    async def _close(self) -> None:  # noqa: B027 - optional hook
        """Release what _open acquired."""

    async def _follow_loop(self) -> None:  # noqa: B027 - optional hook
        """The storage is used from an event loop other than the one it was opened on: replace
        what is bound to the old loop (connections, asyncio locks) without awaiting on it, since
        the old loop is usually closed. Backends holding nothing loop-bound need nothing here."""

    # ------------------------------------------------------------------ core

    async def _insert(self, record: CheckpointRecord) -> str | None:
        """Insert ``record`` with the workflow's next sequence number unless its id exists.

        Returns None if inserted, else the digest stored under that id (nothing is written).
        The default forwards to ``_insert_family((record,))``; override it when one record can
        be written more cheaply than a family.
        """
        return await self._insert_family((record,))

    async def _insert_family(self, records: Sequence[CheckpointRecord]) -> str | None:
        """Insert a checkpoint (``records[0]``) and its nested records, all or nothing.

        If the checkpoint's id exists, write nothing and return its stored digest, or anything
        the engine compares with ``records[0].digest`` the same way (equal: the same body is
        stored; different: the engine compares decoded contents; SQLite and memory compare the
        stored bytes instead of hashing, and return the record's digest or a non-digest). If a nested
        record's id exists, write nothing and raise ``nested_id_conflict(records, id)``. Otherwise
        insert every record, each with the next sequence number of its own workflow name, and
        return None. Needed by backends that declare ``nested``.
        """
        raise self._missing("_insert_family")

    async def _insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        """``_insert_family`` behind a fence, all in one atomic step: if the checkpoint's id
        exists, write nothing and return the latest and the stored digest; else if the workflow's
        latest top-level record is not ``expected_latest_id``, write nothing and return the
        latest; else insert as ``_insert_family`` does and return None. Needed by ``fencing``."""
        raise self._missing("_insert_fenced")

    @abc.abstractmethod
    async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
        """The body stored under ``checkpoint_id`` (nested records too), or None if there is none."""

    async def _load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        """The body stored under ``checkpoint_id`` for decoding, or None. A backend that can read
        the nested records' bodies in the same round trip returns them in ``StoredBody.nested``."""
        body = await self._get(checkpoint_id)
        return None if body is None else StoredBody(checkpoint_id, body)

    @abc.abstractmethod
    async def _latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        """The top-level body with the highest sequence in the workflow (optionally of one signature)."""

    @abc.abstractmethod
    async def _list(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        """Bodies of the workflow in ascending sequence (top-level records unless include_nested)."""

    @abc.abstractmethod
    async def _list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        """Ids of the workflow in ascending sequence (top-level records unless include_nested)."""

    @abc.abstractmethod
    async def _remove(self, checkpoint_id: CheckpointID) -> bool:
        """Delete one record and every record nested in it, atomically; True if it existed.

        A nested record is not deleted: raise NestedCheckpointDeletionError naming its container.
        """

    # ------------------------------------------------------------------ per capability

    async def _nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        """Bodies of every record nested, at any depth, in the given records (more is harmless)."""
        raise self._missing("_nested_bodies")

    async def _nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        """Direct children of a record by position, or None if the record does not exist."""
        raise self._missing("_nested_ids")

    async def _walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        """The records an ancestry walk from ``checkpoint_id`` reaches, in one round trip.

        ``links`` is empty if ``checkpoint_id`` is not stored. See :class:`WalkRecords`.
        """
        raise self._missing("_walk")

    async def _prune(self, workflow_name: str, keep_last: int) -> int:
        """Delete all but the newest ``keep_last`` top-level records of the workflow, with their
        nested records, and tombstone every deleted id, atomically; return the top-level count."""
        raise self._missing("_prune")

    async def _delete_workflow(self, workflow_name: str) -> int:
        """Delete the workflow's top-level records, their nested records and the workflow's
        tombstones; return the top-level count."""
        raise self._missing("_delete_workflow")

    async def _workflow_names(self) -> list[str]:
        """Every workflow name with at least one stored top-level record, in any order."""
        raise self._missing("_workflow_names")

    async def _overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        """Replace a stored body (keep the stored digest: it records what was saved); False if
        the id is absent, and then write nothing."""
        raise self._missing("_overwrite_body")

    async def _info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        """The index entry of one record (nested ones too), or None; ``info_from_index`` builds it."""
        raise self._missing("_info")

    async def _records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        """Index entries of every record (or one workflow's), nested ones included, any order."""
        raise self._missing("_records")

    async def _tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        """Ids pruned from the store (or from one workflow), any order."""
        raise self._missing("_tombstones")


_EXTENSION_PRIMITIVES: tuple[str, ...] = tuple(
    dict.fromkeys(name for names in CAPABILITY_PRIMITIVES.values() for name in names)
)
