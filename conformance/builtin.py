"""The kit's no-argument run: every registered backend on its embedded default, plus the servers
configured in the environment.

What runs comes from the backend registry (storages/registry.py): each backend whose
``BackendSpec.embedded`` names an :class:`~conformance.embedded.EmbeddedBackend` is checked on it,
and each whose ``server_url_env`` variable is set (``CHECKPOINT_POSTGRESQL_URL=postgresql://...``)
is checked on that server too, under a run prefix of its own. Configured servers come first: one
that cannot be reached ends the run (exit status 2) before any embedded backend starts. Nothing
starts until a target is first opened; a backend whose optional dependency is missing, a
configured URL that is wrong and a third-party entry point that could not be registered are not
skipped: each target fails to open with its typed error, so the report shows it as an error. A
registered backend the run cannot check at all (no embedded default, no server configured) is
named with what it needs (:func:`not_run_backends`).
"""

from __future__ import annotations

import os
from typing import Any

from storages.engine import CheckpointStore
from storages.errors import CheckpointStorageError, MissingDependencyError
from storages.registry import BUILTIN_BACKENDS as BUILTIN_SPECS
from storages.registry import RegisteredBackend, load_reference, registry

from .embedded import BuiltinBackend, Embedded, EmbeddedBackend
from .report import NotRun
from .target import StorageTarget, new_run_prefix, target_from_url

BUILTIN_BACKENDS: tuple[EmbeddedBackend, ...] = tuple(
    load_reference(spec.embedded) for spec in BUILTIN_SPECS if spec.embedded is not None
)
"""The built-in backends' embedded defaults, in report order (from the registry)."""


class _EmbeddedTarget:
    """Starts the backend and opens its root storage on first use; each clause gets a new handle."""

    def __init__(self, backend: BuiltinBackend) -> None:
        self._backend = backend
        self._embedded: Embedded | None = None
        self._root: CheckpointStore | None = None
        self._expiring: CheckpointStore | None = None

    async def open(self) -> CheckpointStore:
        from storages.urls import open_storage

        embedded = self._started()
        if self._root is None:
            if embedded.open is not None:
                self._root = embedded.open()
            else:
                # Raises MissingDependencyError when the backend's extra is not installed.
                self._root = open_storage(embedded.url, **embedded.options)
        return self._root.new_handle()

    async def open_expiring(self) -> CheckpointStore:
        """A handle on the backend's short-lived store, where it has one (``Embedded.
        open_expiring``); else a handle as :meth:`open` gives."""
        embedded = self._started()
        if embedded.open_expiring is None:
            return await self.open()
        if self._expiring is None:
            self._expiring = embedded.open_expiring()
        return self._expiring.new_handle()

    def _started(self) -> Embedded:
        if self._embedded is None:
            self._embedded = self._backend.start()
        return self._embedded

    def rebuild(self) -> CheckpointStore:
        """A new root storage on the running embedded store, built from its settings."""
        from storages.urls import open_storage

        if self._embedded is None:
            raise RuntimeError("the embedded backend has not started")
        if self._embedded.open is not None:
            return self._embedded.open()
        return open_storage(self._embedded.url, **self._embedded.options)

    async def fresh_store(self) -> bool:
        """Moves to a new, empty store where the running backend makes one (``Embedded.
        next_store``); False where it does not, or has not started (its first store is new)."""
        embedded = self._embedded
        if embedded is None or embedded.next_store is None:
            return False
        for root in (self._root, self._expiring):
            if root is not None:
                await root.aclose()
        self._root = self._expiring = None
        self._embedded = embedded.next_store()
        return True

    def process_opener(self) -> str | None:
        return None if self._embedded is None else self._embedded.process_opener

    async def cleanup(self) -> None:
        roots, embedded = (self._root, self._expiring), self._embedded
        self._root = self._expiring = self._embedded = None
        try:
            for root in roots:
                if root is not None:
                    await root.aclose()
        finally:
            if embedded is not None and embedded.stop is not None:
                embedded.stop()


def builtin_target(backend: BuiltinBackend) -> StorageTarget:
    """A target for one built-in backend; starting it is deferred to the first open."""
    embedded = _EmbeddedTarget(backend)
    return StorageTarget(
        name=backend.name,
        factory=embedded.open,
        cleanup=embedded.cleanup,
        fresh_store=embedded.fresh_store,
        faults=backend.faults,
        round_trips=backend.round_trips,
        expected_failures=backend.expected_failures,
        process_opener=embedded.process_opener,
        reopen=embedded.rebuild,
        expiry_factory=embedded.open_expiring,
        timeout_factor=backend.timeout_factor,
        # Each clause starts on an empty store where the backend makes one cheaply (the embedded
        # S3's buckets); elsewhere its workflows go when it ends, as on a server: a store that only
        # grows makes every later listing dearer.
        remove_workflows=True,
    )


def builtin_targets() -> list[StorageTarget]:
    """The no-argument run's targets: each configured server first (an unreachable one fails the
    run before anything else starts), then each registered backend on its embedded default (no
    servers to run), then each third-party backend that was refused."""
    backends = registry()
    targets: list[StorageTarget] = []
    for backend in backends.backends:
        variable = backend.spec.server_url_env
        url = _configured_url(variable)
        if variable and url:
            targets.append(_server_target(backend, variable, url))
    targets += [_embedded_target(backend) for backend in backends.backends if backend.spec.embedded]
    targets += [unavailable_target(problem.backend, problem) for problem in backends.problems]
    return targets


def not_run_backends() -> list[NotRun]:
    """What the no-argument run leaves out, each with what it would need: a registered backend
    with no embedded default and no configured server, and the server of a backend whose
    variable is not set."""
    return [entry for backend in registry().backends if (entry := _not_run(backend)) is not None]


def _not_run(backend: RegisteredBackend) -> NotRun | None:
    spec = backend.spec
    variable = spec.server_url_env
    if _configured_url(variable):
        return None  # its server is checked
    if spec.embedded is not None:  # checked embedded; only a server of its own is left out
        return (
            NotRun(f"{spec.name} (${variable})", f"its server: {variable} is not set") if variable else None
        )
    scheme = spec.schemes[0]
    if variable:
        reason = f"needs a server: set {variable}={scheme}://... or give its URL"
    else:
        reason = f"has no embedded default: give its URL, checkpoint-conformance {scheme}://..."
    if backend.entry_point is not None:
        reason += f" ({backend.origin})"
    try:
        backend.check_installed()
    except MissingDependencyError as exc:
        reason += f"; and {exc}"
    return NotRun(spec.name, reason)


def _configured_url(variable: str | None) -> str:
    return os.environ.get(variable, "").strip() if variable else ""


def _embedded_target(backend: RegisteredBackend) -> StorageTarget:
    assert backend.spec.embedded is not None
    try:
        embedded = load_reference(backend.spec.embedded)
    except Exception as exc:  # a third-party module's import error of any kind is reported
        return unavailable_target(
            f"{backend.spec.name} (embedded)",
            CheckpointStorageError(
                f"backend {backend.spec.name!r} ({backend.origin}): cannot import its embedded default "
                f"{backend.spec.embedded!r}: {type(exc).__name__}: {exc}"
            ),
        )
    if not isinstance(embedded, EmbeddedBackend):
        return unavailable_target(
            f"{backend.spec.name} (embedded)",
            CheckpointStorageError(
                f"backend {backend.spec.name!r} ({backend.origin}): its embedded default "
                f"{backend.spec.embedded!r} is a {type(embedded).__name__}, not a "
                "conformance.embedded.EmbeddedBackend"
            ),
        )
    return builtin_target(embedded)


def _server_target(backend: RegisteredBackend, variable: str, url: str) -> StorageTarget:
    """The configured server of ``variable``: written under a run prefix, every workflow removed."""
    try:
        target = target_from_url(url, run_prefix=new_run_prefix(), remove_workflows=True)
    except CheckpointStorageError as exc:  # a wrong URL or a missing extra: reported, not skipped
        return unavailable_target(f"{backend.spec.name} (${variable})", exc)
    except Exception as exc:  # a third-party from_url may refuse a URL with any exception
        refusal = CheckpointStorageError(
            f"backend {backend.spec.name!r} ({backend.origin}) refused ${variable}: "
            f"{type(exc).__name__}: {exc}"
        )
        return unavailable_target(f"{backend.spec.name} (${variable})", refusal)
    target.name = f"{target.name} (${variable})"
    return target


def unavailable_target(name: str, error: BaseException) -> StorageTarget:
    """A target that cannot open, so the run reports ``error`` against ``name`` instead of hiding it."""

    def refuse() -> Any:
        raise error

    return StorageTarget(name=name, factory=refuse)


__all__ = [
    "BUILTIN_BACKENDS",
    "BuiltinBackend",
    "Embedded",
    "EmbeddedBackend",
    "builtin_target",
    "builtin_targets",
    "not_run_backends",
    "unavailable_target",
]
