"""The one registry of storage backends: built-in ones listed here, third-party ones found through
the ``checkpoint_storages.backends`` entry-point group.

A backend is one :class:`BackendSpec`: its URL schemes, the extra and the imports it needs, a
factory named as ``"module:attr"`` (imported only when a URL of the backend is opened), and
optionally the embedded default the conformance kit checks with no URL and an environment
variable naming a configured server. :func:`~storages.urls.open_storage`, the lazy exports of
``storages``, the kit's default run and both command-line tools read this registry, so adding a
built-in backend is one entry in :data:`BUILTIN_BACKENDS` and adding a third-party one is one
entry point (docs/registry.md)::

    [project.entry-points."checkpoint_storages.backends"]
    mine = "mine_backend:BACKEND"      # a BackendSpec whose name is "mine"

A third-party spec that claims a built-in name or scheme, or one another third-party spec claims
too, is refused; so is an entry point that fails to load. Either way only the schemes involved
raise (a typed :class:`~storages.errors.BackendRegistrationError` naming the entry point); every
other scheme works as before.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import BackendEntryPointError, BackendRegistrationError, MissingDependencyError

if TYPE_CHECKING:
    from .engine import CheckpointStore

ENTRY_POINT_GROUP = "checkpoint_storages.backends"
"""The entry-point group third-party backends register in; each entry point names a BackendSpec."""

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{0,39}")  # RFC 3986 scheme, lower case
_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """One storage backend, as the registry knows it. Nothing it names is imported until used.

    Args:
        name: the backend's name (lower case; the entry point's name for a third-party backend).
        schemes: the URL schemes it opens, e.g. ``("redis", "rediss")``.
        factory: ``"module:attr"`` naming a class (or object) whose ``from_url(url, *, codec=...,
            **options)`` builds the storage, a :class:`~storages.engine.CheckpointStore`.
        extra: the pip extra that installs its dependencies, e.g. ``"sqlite"`` for
            ``checkpoint-storages[sqlite]`` (a third-party backend's extra is of its own distribution).
        requires: import names that must be importable before the factory is imported; a missing
            one raises MissingDependencyError naming ``extra``.
        embedded: ``"module:attr"`` naming a ``conformance.builtin.EmbeddedBackend``: how the
            kit's no-argument run brings the backend up with nothing but Python packages.
        server_url_env: an environment variable holding the URL of a configured server; when it
            is set, the kit's no-argument run checks that server too (under a run prefix of its own).
        run_prefix: ``"module:attr"`` naming ``(url, run_prefix) -> url``: the URL of a namespace of
            the same store no other run uses (a key prefix, a schema); None when there is none.
        summary: one line for ``checkpoint-storages backends``.
    """

    name: str
    schemes: tuple[str, ...]
    factory: str
    extra: str | None = None
    requires: tuple[str, ...] = ()
    embedded: str | None = None
    server_url_env: str | None = None
    run_prefix: str | None = None
    summary: str = ""

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            problems.append(f"name {self.name!r} is not a lower-case name ([a-z][a-z0-9_-]*)")
        if isinstance(self.schemes, str) or not isinstance(self.schemes, tuple) or not self.schemes:
            problems.append(f"schemes must be a non-empty tuple of URL schemes, got {self.schemes!r}")
        else:
            problems += [
                f"scheme {scheme!r} is not a lower-case URL scheme"
                for scheme in self.schemes
                if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme)
            ]
        for option in ("factory", "embedded", "run_prefix"):
            value = getattr(self, option)
            if (value is not None or option == "factory") and not (
                isinstance(value, str) and _REFERENCE.fullmatch(value)
            ):
                problems.append(f"{option} {value!r} is not a 'module:attr' reference")
        if problems:
            raise BackendRegistrationError(
                f"BackendSpec {self.name!r}: " + "; ".join(problems), backend=str(self.name)
            )


def load_reference(reference: str) -> Any:
    """The object a ``"module:attr"`` reference names (``attr`` may be dotted)."""
    module_name, _, qualname = reference.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


@dataclass(frozen=True, slots=True)
class RegisteredBackend:
    """A backend the registry accepted: its spec and where it came from."""

    spec: BackendSpec
    distribution: str = "checkpoint-storages"
    """What ``pip install`` names for the backend's extra."""
    entry_point: str | None = None
    """``name = module:attr`` for a third-party backend; None for a built-in one."""

    @property
    def origin(self) -> str:
        if self.entry_point is None:
            return "built-in"
        return f"entry point {self.entry_point!r} ({self.distribution})"

    def check_installed(self, scheme: str | None = None) -> None:
        """Raise MissingDependencyError, naming the extra, if an import the backend needs is missing."""
        for module in self.spec.requires:
            if importlib.util.find_spec(module) is None:
                raise MissingDependencyError(
                    f"{scheme or self.spec.schemes[0]}:// storage",
                    self.spec.extra,
                    module,
                    distribution=self.distribution,
                )

    def factory(self, scheme: str | None = None) -> Any:
        """The imported factory (after :meth:`check_installed`); an import failure names the backend."""
        self.check_installed(scheme)
        try:
            factory = load_reference(self.spec.factory)
        except (ImportError, AttributeError) as exc:
            raise BackendRegistrationError(
                f"backend {self.spec.name!r} ({self.origin}): cannot import its factory "
                f"{self.spec.factory!r}: {type(exc).__name__}: {exc}",
                backend=self.spec.name,
            ) from exc
        if not callable(getattr(factory, "from_url", None)):
            raise BackendRegistrationError(
                f"backend {self.spec.name!r} ({self.origin}): its factory {self.spec.factory!r} has no "
                "from_url(url, codec=...)",
                backend=self.spec.name,
            )
        return factory

    def open(self, url: str, scheme: str | None = None, **options: Any) -> CheckpointStore:
        """``factory.from_url(url, **options)``, checked to be a storage."""
        from .engine import CheckpointStore

        storage = self.factory(scheme).from_url(url, **options)
        if not isinstance(storage, CheckpointStore):
            raise BackendRegistrationError(
                f"backend {self.spec.name!r} ({self.origin}): {self.spec.factory}.from_url returned "
                f"{type(storage).__name__}, not a storages.CheckpointStore",
                backend=self.spec.name,
            )
        return storage


@dataclass(frozen=True, slots=True)
class BackendRegistry:
    """The accepted backends (built-in ones first, in their order, then third-party ones by name)
    and the refused ones, each refusal kept as the error to raise for the schemes it claims."""

    backends: tuple[RegisteredBackend, ...]
    problems: tuple[BackendRegistrationError, ...] = ()
    _refused: dict[str, BackendRegistrationError] = field(default_factory=dict)
    """scheme or entry-point name -> why the backend claiming it was refused."""

    @classmethod
    def build(
        cls, builtins: Sequence[BackendSpec], entry_points: Iterable[importlib.metadata.EntryPoint] = ()
    ) -> BackendRegistry:
        """The registry of ``builtins`` and the backends ``entry_points`` name. Never raises for a
        third-party problem: a broken or clashing entry point is kept in :attr:`problems`."""
        accepted = [RegisteredBackend(spec) for spec in builtins]
        claimed: dict[str, str] = {}
        for spec in builtins:
            for key in _claims(spec):
                if key in claimed:
                    raise BackendRegistrationError(
                        f"built-in backends {claimed[key]!r} and {spec.name!r} both claim {key!r}",
                        backend=spec.name,
                    )
                claimed[key] = spec.name
        refused: dict[str, BackendRegistrationError] = {}
        candidates: list[RegisteredBackend] = []
        for entry_point in sorted(entry_points, key=lambda ep: (ep.name, ep.value)):
            try:
                candidates.append(_load_entry_point(entry_point))
            except BackendEntryPointError as error:
                refused[entry_point.name] = error
        third_party: dict[str, list[RegisteredBackend]] = {}
        for candidate in dict.fromkeys(candidates):  # the same spec found twice is one backend
            for key in _claims(candidate.spec):
                third_party.setdefault(key, []).append(candidate)
        for candidate in dict.fromkeys(candidates):
            keys = _claims(candidate.spec)
            clashes = [
                f"{key!r}, which is the built-in {claimed[key]!r} backend's"
                if key in claimed
                else f"{key!r}, which {', '.join(o.origin for o in third_party[key] if o != candidate)} "
                "claims too"
                for key in keys
                if key in claimed or len(third_party[key]) > 1
            ]
            if clashes:
                refusal = BackendRegistrationError(
                    f"backend {candidate.spec.name!r} ({candidate.origin}) is not registered: it claims "
                    + "; ".join(clashes)
                    + ". Rename its name or scheme.",
                    backend=candidate.spec.name,
                )
                for key in keys:
                    refused.setdefault(key, refusal)
            else:
                accepted.append(candidate)
        problems = tuple(dict.fromkeys(refused.values()))
        return cls(tuple(accepted), problems, refused)

    def schemes(self) -> list[str]:
        """Every scheme an accepted backend opens, sorted."""
        return sorted(scheme for backend in self.backends for scheme in backend.spec.schemes)

    def for_scheme(self, scheme: str) -> RegisteredBackend | None:
        """The backend opening ``scheme``; raises the refusal if a refused backend claimed it, and
        returns None for a scheme no backend claims."""
        for backend in self.backends:
            if scheme in backend.spec.schemes:
                return backend
        refusal = self._refused.get(scheme)
        if refusal is not None:
            raise refusal.with_traceback(None)  # one stored error, raised afresh each time
        return None

    def named(self, name: str) -> RegisteredBackend:
        """The accepted backend called ``name``; raises KeyError (or the refusal) otherwise."""
        for backend in self.backends:
            if backend.spec.name == name:
                return backend
        refusal = self._refused.get(name)
        if refusal is not None:
            raise refusal.with_traceback(None)  # one stored error, raised afresh each time
        raise KeyError(f"no storage backend named {name!r}; registered: " + ", ".join(self.names()))

    def names(self) -> list[str]:
        return [backend.spec.name for backend in self.backends]


def _claims(spec: BackendSpec) -> tuple[str, ...]:
    """The keys a backend claims: its name and its schemes (a scheme usually is the name)."""
    return tuple(dict.fromkeys((spec.name, *spec.schemes)))


def _load_entry_point(entry_point: importlib.metadata.EntryPoint) -> RegisteredBackend:
    dist = getattr(entry_point, "dist", None)
    distribution = dist.name if dist is not None else entry_point.value.partition(":")[0].split(".")[0]
    where = f"{entry_point.name} = {entry_point.value}"

    def refuse(reason: str) -> BackendEntryPointError:
        return BackendEntryPointError(where, distribution, reason)

    try:
        spec = entry_point.load()
    except Exception as exc:  # an author's import error of any kind must not break other schemes
        raise refuse(f"it failed to load: {type(exc).__name__}: {exc}") from exc
    if not isinstance(spec, BackendSpec):
        raise refuse(f"it names a {type(spec).__name__}, not a storages.registry.BackendSpec")
    if spec.name != entry_point.name:
        raise refuse(f"its BackendSpec is named {spec.name!r}; the entry point must carry the same name")
    return RegisteredBackend(spec, distribution=distribution, entry_point=where)


BUILTIN_BACKENDS: tuple[BackendSpec, ...] = (
    BackendSpec(
        "memory",
        ("memory",),
        "storages.memory:InMemoryCheckpointStorage",
        embedded="conformance.embedded:MEMORY",
        summary="this process's memory (tests, demos)",
    ),
    BackendSpec(
        "sqlite",
        ("sqlite",),
        "storages.sqlite:SQLiteCheckpointStorage",
        requires=("sqlite3",),  # the standard library's, absent only from Pythons built without it
        embedded="conformance.embedded:SQLITE_TEMP_FILE",
        summary="a SQLite file (the standard library's sqlite3, on a thread per handle)",
    ),
    BackendSpec(
        "redis",
        ("redis", "rediss"),
        "storages.redis:RedisCheckpointStorage",
        extra="redis",
        requires=("redis",),
        embedded="conformance.embedded:REDIS_FAKEREDIS",
        run_prefix="storages.redis.config:scoped_url",
        summary="a Redis server or Redis Cluster (redis-py); docs/redis.md",
    ),
    BackendSpec(
        "s3",
        ("s3",),
        "storages.s3:S3CheckpointStorage",
        extra="s3",
        requires=("boto3",),
        embedded="conformance.embedded:S3_MOTO",
        run_prefix="storages.s3.config:scoped_url",
        summary="objects in S3 or an S3-compatible store (boto3); docs/s3.md",
    ),
    BackendSpec(
        "postgres",
        ("postgresql", "postgres"),
        "storages.postgres:PostgresCheckpointStorage",
        extra="postgres",
        requires=("psycopg", "psycopg_pool"),
        server_url_env="CHECKPOINT_POSTGRESQL_URL",
        run_prefix="storages.postgres.config:scoped_url",
        summary="a PostgreSQL database (psycopg 3); docs/postgres.md",
    ),
)
"""The built-in backends, in report order: adding one is one entry here."""


_registry: BackendRegistry | None = None


def registry() -> BackendRegistry:
    """The process's registry: the built-in backends and the installed entry points, read on first
    use (:func:`reload_registry` reads the entry points again)."""
    return _registry if _registry is not None else reload_registry()


def reload_registry() -> BackendRegistry:
    """Read the installed entry points again (after installing a backend into a running process)."""
    global _registry
    _registry = BackendRegistry.build(
        BUILTIN_BACKENDS, importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    )
    return _registry


def lazy_exports() -> dict[str, str]:
    """Class name -> module of every built-in backend's factory, for ``storages``' lazy exports."""
    return {
        spec.factory.partition(":")[2]: spec.factory.partition(":")[0]
        for spec in BUILTIN_BACKENDS
        if "." not in spec.factory.partition(":")[2]
    }


__all__ = [
    "BUILTIN_BACKENDS",
    "ENTRY_POINT_GROUP",
    "BackendRegistry",
    "BackendSpec",
    "RegisteredBackend",
    "lazy_exports",
    "load_reference",
    "registry",
    "reload_registry",
]
