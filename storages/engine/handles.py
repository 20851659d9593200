"""New handles on the same store, without a backend re-listing its constructor's arguments.

The engine records the arguments each storage was constructed with (the outermost ``__init__``
call of its class), so the default ``new_handle()`` builds ``type(self)(*same arguments)``,
changed only by the backend's ``_handle_overrides()`` (a resolved path, a shared in-process
store, "do not create the bucket again") and always reusing this handle's codec and integrity
keys. A backend that still writes its own ``new_handle`` keeps its integrity keys too.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

_SETTINGS = "_constructed_with"


@dataclass(frozen=True, slots=True)
class HandleSettings:
    """The arguments a storage was constructed with, by name where its signature names them."""

    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    parameters: frozenset[str] = frozenset()
    """Every parameter name the constructor accepts (``**kwargs`` counted as accepting any)."""
    accepts_any_keyword: bool = False

    def accepts(self, name: str) -> bool:
        return self.accepts_any_keyword or name in self.parameters

    def rebuilt(self, overrides: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments for a new handle, ``overrides`` applied by parameter name."""
        kwargs = dict(self.kwargs)
        kwargs.update((name, value) for name, value in overrides.items() if self.accepts(name))
        return self.args, kwargs


def recording_settings(init: Callable[..., None]) -> Callable[..., None]:
    """Wrap a storage class's ``__init__`` so the first (outermost) call records its arguments."""
    if getattr(init, "_records_settings", False):
        return init
    try:
        signature = inspect.signature(init)
    except (TypeError, ValueError):  # not a Python function: nothing to record by name
        return init
    names = [p for p in signature.parameters.values() if p.name != "self"]
    positional = [
        p.name
        for p in names
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    positional_only = {p.name for p in names if p.kind is inspect.Parameter.POSITIONAL_ONLY}
    parameters = frozenset(p.name for p in names if p.kind is not inspect.Parameter.VAR_POSITIONAL)
    any_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in names)
    takes_varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in names)

    @functools.wraps(init)
    def recording(self: Any, *args: Any, **kwargs: Any) -> None:
        if _SETTINGS not in self.__dict__:
            # Positional arguments are kept by name where they have one, so an override by name
            # (say path=) replaces them; only positional-only and *args stay positional.
            keep_positional = takes_varargs or bool(positional_only)
            if keep_positional or len(args) > len(positional):
                settings = HandleSettings(tuple(args), dict(kwargs), parameters, any_keyword)
            else:
                named = dict(zip(positional, args, strict=False))
                settings = HandleSettings((), {**named, **kwargs}, parameters, any_keyword)
            self.__dict__[_SETTINGS] = settings
        init(self, *args, **kwargs)

    recording._records_settings = True  # type: ignore[attr-defined]
    return recording


def settings_of(storage: Any) -> HandleSettings:
    settings = storage.__dict__.get(_SETTINGS)
    return settings if isinstance(settings, HandleSettings) else HandleSettings()


def carrying_integrity(new_handle: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a backend's own ``new_handle`` so the handle it builds keeps this one's keys."""

    @functools.wraps(new_handle)
    def carrying(self: Any, *args: Any, **kwargs: Any) -> Any:
        handle = new_handle(self, *args, **kwargs)
        if getattr(handle, "_integrity", self) is None:
            handle._integrity = self._integrity
        return handle

    carrying._carries_integrity = True  # type: ignore[attr-defined]
    return carrying
