"""The parts of one storage handle that its operations share: the backend, the codec, the
lifecycle, the reader and (on a keyed handle) the sealer. The storage builds them; each
collaborator (pending writes, receipts, extensions) is handed the same parts."""

from __future__ import annotations

from dataclasses import dataclass

from ..backend import Backend
from ..codec import CheckpointCodec
from ..codec.overrides import BodyCodec
from ..contract import Capability, validate_identifier
from ..errors import InvalidCheckpointError, UnsupportedOperationError
from .lifecycle import Lifecycle
from .reading import Reader
from .sealing import Sealer
from .validation import NUL_IN_SIGNATURE


@dataclass(frozen=True, slots=True)
class HandleParts:
    backend: Backend
    codec: CheckpointCodec
    bodies: BodyCodec
    """The codec as the handle calls it for bodies a seal covers (overrides.body_codec)."""
    lifecycle: Lifecycle
    reader: Reader
    sealer: Sealer | None
    capabilities: frozenset[Capability]

    def require(self, capability: Capability, operation: str) -> None:
        """Refuse ``operation`` unless the backend declares ``capability``."""
        if capability not in self.capabilities:
            raise UnsupportedOperationError(self.backend.describe(), operation, capability.value)

    async def ready(self, operation: str) -> None:
        """Make the backend ready for ``operation`` (see Lifecycle.ensure)."""
        await self.lifecycle.ensure(operation)

    def check_listing(
        self, operation: str, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> None:
        """Refuse a listing's arguments before any round trip: an invalid workflow name, a
        signature filter or nested records the storage does not declare."""
        validate_identifier(workflow_name, "workflow_name")
        if graph_signature_hash is not None:
            self.require(Capability.SIGNATURE_FILTER, f"{operation}(graph_signature_hash=...)")
            if not isinstance(graph_signature_hash, str):
                raise InvalidCheckpointError(
                    f"graph_signature_hash must be a str, not {type(graph_signature_hash).__name__}",
                    field="graph_signature_hash",
                )
            if "\x00" in graph_signature_hash:
                raise InvalidCheckpointError(
                    f"{operation}(graph_signature_hash=...) {NUL_IN_SIGNATURE}", field="graph_signature_hash"
                )
        if include_nested:
            self.require(Capability.NESTED, f"{operation}(include_nested=True)")
