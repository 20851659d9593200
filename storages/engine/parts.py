"""The parts of one storage handle that its operations share: the backend, the codec, the
lifecycle, the reader and (on a keyed handle) the sealer. The storage builds them; each
collaborator (pending writes, receipts, extensions) is handed the same parts."""

from __future__ import annotations

from dataclasses import dataclass

from ..backend import Backend
from ..codec import CheckpointCodec
from ..contract import Capability
from ..errors import UnsupportedOperationError
from .lifecycle import Lifecycle
from .reading import Reader
from .sealing import Sealer


@dataclass(frozen=True, slots=True)
class HandleParts:
    backend: Backend
    codec: CheckpointCodec
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
        if not self.lifecycle.is_ready():
            await self.lifecycle.ensure(operation)
