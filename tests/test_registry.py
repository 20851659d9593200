"""The backend registry (storages/registry.py): built-in specs, entry points accepted and refused,
and what open_storage, the lazy exports and the kit's default run read from it.

The entry points here are built in the test (importlib.metadata.EntryPoint naming objects of this
module); tests/test_registry_thirdparty.py installs real distributions.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from typing import Any

import pytest

import storages
import storages.registry
from conformance.builtin import builtin_targets
from conformance.embedded import Embedded, EmbeddedBackend
from conformance.target import with_run_prefix
from storages import (
    InMemoryCheckpointStorage,
    MissingDependencyError,
    StorageConfigurationError,
    WorkflowCheckpoint,
    open_storage,
    supported_schemes,
)
from storages.errors import BackendEntryPointError, BackendRegistrationError
from storages.registry import BUILTIN_BACKENDS, ENTRY_POINT_GROUP, BackendRegistry, BackendSpec, registry


class GoodStorage(InMemoryCheckpointStorage):
    """A third-party storage opened as ``good://``."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> GoodStorage:
        return cls(**options)

    def describe(self) -> str:
        return "good://"


class NotAStorage:
    @classmethod
    def from_url(cls, url: str, **options: Any) -> str:
        return url


def good_run_prefix(url: str, run_prefix: str) -> str:
    return f"{url}?space={run_prefix}"


GOOD = BackendSpec(
    "good",
    ("good", "good+tls"),
    f"{__name__}:GoodStorage",
    embedded=f"{__name__}:GOOD_EMBEDDED",
    server_url_env="TEST_REGISTRY_GOOD_URL",
    run_prefix=f"{__name__}:good_run_prefix",
)
GOOD_EMBEDDED = EmbeddedBackend("good (memory)", lambda: Embedded("good://"))
CLAIMS_S3 = BackendSpec("clash", ("clash", "s3"), f"{__name__}:GoodStorage")
RIVAL = BackendSpec("rival", ("rival", "good+tls"), f"{__name__}:GoodStorage")
NEEDY = BackendSpec(
    "needy", ("needy",), f"{__name__}:GoodStorage", extra="fast", requires=("no_such_driver_x",)
)
BAD_FACTORY = BackendSpec("badfactory", ("badfactory",), f"{__name__}:NotAStorage")
NOT_A_SPEC = object()


def entry_point(name: str, attr: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=f"{__name__}:{attr}", group=ENTRY_POINT_GROUP)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Callable[..., BackendRegistry]:
    """``installed(*entry_points)``: make the process's registry the built-ins plus these."""

    def install(*entry_points: importlib.metadata.EntryPoint) -> BackendRegistry:
        built = BackendRegistry.build(BUILTIN_BACKENDS, entry_points)
        monkeypatch.setattr(storages.registry, "_registry", built)
        return built

    return install


# ---------------------------------------------------------------------- built-in backends


def test_every_builtin_backend_opens_its_schemes_with_its_factory() -> None:
    for spec in BUILTIN_BACKENDS:
        backend = registry().named(spec.name)
        for scheme in spec.schemes:
            assert registry().for_scheme(scheme) is backend
        factory = backend.factory()
        assert callable(factory.from_url)


def test_lazy_exports_are_the_registry_factories_and_stay_exported() -> None:
    for spec in BUILTIN_BACKENDS:
        module, _, name = spec.factory.partition(":")
        assert name in storages.__all__
        assert getattr(storages, name) is getattr(importlib.import_module(module), name)
    for name in ("SQLiteCheckpointStorage", "RedisCheckpointStorage", "S3CheckpointStorage"):
        assert name in storages.__all__  # importable before the registry existed; still so
    with pytest.raises(AttributeError, match="NoSuchStorage"):
        _ = storages.NoSuchStorage


def test_builtin_backends_claiming_one_scheme_are_a_programming_error() -> None:
    twice = BackendSpec("other", ("memory",), "storages.memory:InMemoryCheckpointStorage")
    with pytest.raises(BackendRegistrationError, match="'memory' and 'other' both claim 'memory'"):
        BackendRegistry.build((*BUILTIN_BACKENDS, twice))


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"name": "Mine"}, "name 'Mine'"),
        ({"schemes": ()}, "schemes must be a non-empty tuple"),
        ({"schemes": "mine"}, "schemes must be a non-empty tuple"),
        ({"schemes": ("mine", "My_Scheme")}, "scheme 'My_Scheme'"),
        ({"factory": "mine_backend.MineStorage"}, "factory 'mine_backend.MineStorage'"),
        ({"embedded": "kit"}, "embedded 'kit'"),
        ({"run_prefix": ""}, "run_prefix ''"),
    ],
)
def test_a_malformed_spec_names_the_field(fields: dict[str, Any], named: str) -> None:
    arguments: dict[str, Any] = {"name": "mine", "schemes": ("mine",), "factory": "m:Storage", **fields}
    with pytest.raises(BackendRegistrationError, match=named):
        BackendSpec(**arguments)


# ---------------------------------------------------------------------- third-party entry points


async def test_a_registered_backend_opens_through_open_storage(installed: Any) -> None:
    installed(entry_point("good", "GOOD"))
    assert {"good", "good+tls", "memory", "s3"} <= set(supported_schemes())
    async with open_storage("good+tls://") as storage:
        assert type(storage) is GoodStorage
        saved = await storage.save(WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s"))
        assert (await storage.load(saved)).checkpoint_id == saved
    assert registry().named("good").origin == f"entry point 'good = {__name__}:GOOD' ({__name__})"


def test_a_backend_claiming_a_builtin_scheme_is_refused_and_the_builtin_kept(installed: Any) -> None:
    built = installed(entry_point("clash", "CLAIMS_S3"), entry_point("good", "GOOD"))
    assert built.for_scheme("s3") is built.named("s3")
    assert built.named("s3").entry_point is None  # the built-in one
    with pytest.raises(
        BackendRegistrationError, match=r"'s3', which is the built-in 's3' backend's"
    ) as caught:
        open_storage("clash://")
    assert "entry point 'clash = " in str(caught.value)
    assert caught.value.backend == "clash"
    assert type(open_storage("good://")) is GoodStorage  # an unrelated scheme still works
    assert [str(problem) for problem in built.problems] == [str(caught.value)]


def test_two_backends_claiming_one_scheme_are_both_refused_naming_each_other(installed: Any) -> None:
    built = installed(entry_point("good", "GOOD"), entry_point("rival", "RIVAL"))
    assert built.names() == [spec.name for spec in BUILTIN_BACKENDS]
    with pytest.raises(BackendRegistrationError, match="'good\\+tls', which entry point 'rival = "):
        open_storage("good://")
    with pytest.raises(BackendRegistrationError, match="'good\\+tls', which entry point 'good = "):
        open_storage("rival://")
    assert type(open_storage("memory://")) is InMemoryCheckpointStorage


@pytest.mark.parametrize(
    ("name", "attr", "reason"),
    [
        ("broken", "NO_SUCH_ATTRIBUTE", "it failed to load: AttributeError"),
        ("notaspec", "NOT_A_SPEC", "it names a object, not a storages.registry.BackendSpec"),
        ("renamed", "GOOD", "its BackendSpec is named 'good'; the entry point must carry the same name"),
    ],
)
def test_a_broken_entry_point_is_named_and_breaks_no_other_scheme(
    installed: Any, name: str, attr: str, reason: str
) -> None:
    built = installed(entry_point(name, attr))
    [problem] = built.problems
    assert isinstance(problem, BackendEntryPointError)
    assert problem.entry_point == f"{name} = {__name__}:{attr}"
    assert reason in str(problem)
    with pytest.raises(BackendEntryPointError, match=f"'{name} = {__name__}:{attr}'"):
        open_storage(f"{name}://x")
    with pytest.raises(
        StorageConfigurationError, match=f"Unknown storage URL scheme 'nosuch'.*{reason[:20]}"
    ):
        open_storage("nosuch://x")  # an unknown scheme's error mentions the refused entry point
    assert type(open_storage("memory://")) is InMemoryCheckpointStorage


def test_a_missing_dependency_names_the_third_party_distribution(installed: Any) -> None:
    installed(entry_point("needy", "NEEDY"))
    with pytest.raises(MissingDependencyError) as caught:
        open_storage("needy://")
    assert "pip install 'test_registry[fast]'" in str(caught.value)
    assert (caught.value.module, caught.value.distribution) == ("no_such_driver_x", "test_registry")


def test_a_factory_that_builds_no_storage_is_a_typed_error(installed: Any) -> None:
    installed(entry_point("badfactory", "BAD_FACTORY"))
    with pytest.raises(
        BackendRegistrationError, match=r"from_url returned str, not a storages\.CheckpointStore"
    ):
        open_storage("badfactory://")


def test_the_run_prefix_of_a_url_comes_from_its_backend(installed: Any) -> None:
    installed(entry_point("good", "GOOD"))
    assert with_run_prefix("good://", "ck-run-1") == "good://?space=ck-run-1"
    assert with_run_prefix("memory://", "ck-run-1") == "memory://"


# ---------------------------------------------------------------------- the kit's default run


def test_the_default_run_has_every_embedded_default_configured_server_and_refusal(
    installed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed(entry_point("good", "GOOD"), entry_point("broken", "NO_SUCH_ATTRIBUTE"))
    monkeypatch.delenv("TEST_REGISTRY_GOOD_URL", raising=False)
    names = [target.name for target in builtin_targets()]
    assert names == [
        "memory://",
        "sqlite (temp file)",
        "redis (fakeredis)",
        "s3 (moto)",
        "good (memory)",
        f"entry point broken = {__name__}:NO_SUCH_ATTRIBUTE",
    ]
    monkeypatch.setenv("TEST_REGISTRY_GOOD_URL", "good://")
    server = builtin_targets()[0]  # configured servers run first: an unreachable one stops the run
    assert server.name == "good:// ($TEST_REGISTRY_GOOD_URL)"
    assert str(server.process_opener).startswith("good://?space=ck-run-")  # under a run prefix
    monkeypatch.setenv("TEST_REGISTRY_GOOD_URL", "memory://elsewhere")
    server = builtin_targets()[0]
    assert server.name == "good ($TEST_REGISTRY_GOOD_URL)"
    with pytest.raises(StorageConfigurationError, match="names a host or path"):
        server.factory()
