"""How integrations (MAF) extend every codec without the generic codec knowing them.

A plug-in registers itself once, at import (storages/runners/maf.py does, and ``import storages``
imports it): every codec created afterwards calls its :meth:`CodecPlugin.install`, asks it about
type keys its runner allowed, and lets it name checkpoint classes the codec was not given. The
codec imports no plug-in, so there is no import cycle between the codec and an integration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .vocabulary import TypeRef


class PluginHost(Protocol):
    """The part of a CheckpointCodec a plug-in uses (so this module needs no import of it)."""

    def register(
        self,
        type_ref: TypeRef,
        *,
        encode: Callable[[Any], Any] | None = None,
        decode: Callable[[Any], Any] | None = None,
    ) -> None: ...

    def allowed_class(self, key: str, cls: type[Any] | None = None) -> type[Any] | None: ...


class CodecPlugin(Protocol):
    """What an integration contributes to every codec."""

    def install(self, codec: PluginHost) -> None:
        """Register the integration's own types on a new codec (called from its constructor)."""

    def runner_allows(self, key: str) -> bool:
        """True if the integration's runner allowed ``key`` in this process."""

    def checkpoint_tag(self, cls: type[Any]) -> str | None:
        """The stored tag of a checkpoint class of the integration, else None."""

    def checkpoint_class(self, tag: str) -> type[Any] | None:
        """The checkpoint class a stored tag names (importing it), or None if not this plug-in's."""


_PLUGINS: list[CodecPlugin] = []


def register_codec_plugin(plugin: CodecPlugin) -> None:
    """Extend every codec created from now on (registering the same plug-in twice is a no-op)."""
    if plugin not in _PLUGINS:
        _PLUGINS.append(plugin)


def codec_plugins() -> tuple[CodecPlugin, ...]:
    return tuple(_PLUGINS)
