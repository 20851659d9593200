"""The embedded default of ``mine://`` for the kit's no-argument run (imported only by the kit)."""

from __future__ import annotations

from conformance.embedded import Embedded, EmbeddedBackend

EMBEDDED = EmbeddedBackend("mine (memory)", lambda: Embedded("mine://"))
