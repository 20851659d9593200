"""storages/ uses only the public API of its drivers (redis-py, psycopg, psycopg_pool, boto3 and
botocore), read from the source with ast: a private name of theirs may change in any release.

What counts as private: a name with a leading underscore that is not a dunder. Three rules:

- an underscore attribute is read or written only on ``self`` or ``cls`` (our own objects):
  ``client._x``, ``getattr(pool, "_x")``, ``super()._x`` fail, whatever the object is, as the
  source does not say which objects are the drivers' (and a driver's object reaches modules that
  import no driver);
- a class of ours that subclasses a driver class does not touch, through ``self``, an underscore
  name that a driver class in its ancestry defines or assigns (its private state);
- no module or name with a leading underscore is imported from a driver package.

Exceptions are listed in :data:`ALLOWED`, each with the reason it is not a driver's private.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "storages"
DRIVERS = frozenset({"redis", "psycopg", "psycopg_pool", "boto3", "botocore"})

NAMEDTUPLE_API = "a namedtuple's documented API (its underscore keeps it apart from field names)"
ALLOWED: dict[tuple[str, str], str] = {
    ("storages/codec/objects.py", "shape.cls._fields"): NAMEDTUPLE_API,
    ("storages/codec/vocabulary.py", "getattr(cls, '_fields', None)"): NAMEDTUPLE_API,
    ("storages/records.py", "other._fields"): NAMEDTUPLE_API,
    ("storages/tools/inspection/values.py", "getattr(type(item), '_fields', None)"): NAMEDTUPLE_API,
    ("storages/postgres/config.py", "parts._replace"): f"urllib.parse.SplitResult: {NAMEDTUPLE_API}",
    ("storages/redis/config.py", "parts._replace"): f"urllib.parse.SplitResult: {NAMEDTUPLE_API}",
    ("storages/s3/config.py", "parts._replace"): f"urllib.parse.SplitResult: {NAMEDTUPLE_API}",
    (
        "storages/runners/maf.py",
        "getattr(module, '_REGISTERED_CHECKPOINT_TYPE_KEYS', None)",
    ): "agent-framework's checkpoint type registry, read when present: not a driver",
}
"""(file, the expression as ast.unparse writes it) -> why it is not a driver's private name."""


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@dataclass(frozen=True)
class Use:
    path: str
    line: int
    expression: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.expression} ({self.rule})"


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SOURCE.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def private_attributes(path: str, tree: ast.Module) -> Iterator[Use]:
    """Underscore attributes on anything but ``self`` or ``cls``, by dot or by name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                yield Use(path, node.lineno, ast.unparse(node), "underscore attribute of another object")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            yield Use(path, node.lineno, ast.unparse(node), "underscore attribute by name")


def private_imports(path: str, tree: ast.Module) -> Iterator[Use]:
    """``from redis._parsers import ...``, ``from psycopg_pool.base import _x``, ``import psycopg._y``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            parts = []
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            dotted = [*parts, *name.split(".")]
            if dotted[0] in DRIVERS and any(_private(part) for part in dotted):
                yield Use(path, node.lineno, ast.unparse(node), "private driver module or name")


def _driver_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted path, for every name a module imports from a driver package."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in DRIVERS:
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in DRIVERS:  # import redis.asyncio as aioredis; import redis.asyncio
                    names[alias.asname or top] = alias.name if alias.asname else top
    return names


def _resolve(dotted: str) -> object:
    module, _, rest = dotted.partition(".")
    found: object = importlib.import_module(module)
    for part in rest.split(".") if rest else []:
        try:
            found = getattr(found, part)
        except AttributeError:
            found = importlib.import_module(f"{found.__name__}.{part}")  # type: ignore[attr-defined]
    return found


_SELF_PRIVATE = re.compile(r"\bself\.(_[A-Za-z0-9_]+)")


def driver_private_names(cls: type) -> set[str]:
    """The underscore names the driver classes in ``cls``'s ancestry define or use on ``self``."""
    names: set[str] = set()
    for ancestor in cls.__mro__:
        if ancestor.__module__.split(".")[0] not in DRIVERS:
            continue
        names.update(name for name in vars(ancestor) if _private(name))
        names.update(name for name in getattr(ancestor, "__slots__", ()) if _private(name))
        try:
            source = inspect.getsource(ancestor)
        except (OSError, TypeError):
            continue
        names.update(name for name in _SELF_PRIVATE.findall(source) if _private(name))
    return names


def _base_expression(base: ast.expr) -> str | None:
    if isinstance(base, ast.Subscript):  # AsyncConnectionPool[Any]
        base = base.value
    return ast.unparse(base) if isinstance(base, (ast.Name, ast.Attribute)) else None


def subclass_reaches(path: str, tree: ast.Module) -> Iterator[Use]:
    """``self._x`` in a subclass of a driver class, where a driver ancestor has ``_x``."""
    imported = _driver_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        driver_bases = []
        for base in node.bases:
            expression = _base_expression(base)
            if expression is None:
                continue
            head, _, rest = expression.partition(".")
            if head in imported:
                driver_bases.append(_resolve(f"{imported[head]}.{rest}" if rest else imported[head]))
        if not driver_bases:
            continue
        theirs = set().union(*(driver_private_names(base) for base in driver_bases if isinstance(base, type)))
        for inner in ast.walk(node):
            if (
                isinstance(inner, ast.Attribute)
                and isinstance(inner.value, ast.Name)
                and inner.value.id == "self"
                and inner.attr in theirs
            ):
                yield Use(
                    path, inner.lineno, ast.unparse(inner), f"private state of a driver base of {node.name}"
                )


def uses() -> list[Use]:
    found: list[Use] = []
    for path, tree in _sources():
        found.extend(private_attributes(path, tree))
        found.extend(private_imports(path, tree))
        found.extend(subclass_reaches(path, tree))
    return found


def test_storages_use_no_private_name_of_a_driver() -> None:
    unexplained = [str(use) for use in uses() if (use.path, use.expression) not in ALLOWED]
    assert not unexplained, "\n".join(unexplained)


def test_every_allowed_use_is_still_there() -> None:
    """An entry left behind after its code changed would allow the next use at that place."""
    present = {(use.path, use.expression) for use in uses()}
    assert sorted(set(ALLOWED) - present) == []


VIOLATIONS = [
    pytest.param("pool._closed = True\n", "underscore attribute of another object", id="write"),
    pytest.param("connection._close()\n", "underscore attribute of another object", id="call"),
    pytest.param("x = getattr(pool, '_available_connections')\n", "by name", id="getattr"),
    pytest.param("from redis._parsers import Encoder\n", "private driver module", id="private-module"),
    pytest.param("from psycopg_pool.base import _check\n", "private driver module", id="private-name"),
    pytest.param(
        "from redis.asyncio import ConnectionPool\n"
        "class Pool(ConnectionPool):\n"
        "    def free(self):\n"
        "        return self._available_connections\n",
        "private state of a driver base of Pool",
        id="subclass",
    ),
]


@pytest.mark.parametrize(("source", "says"), VIOLATIONS)
def test_each_rule_catches_its_violation(source: str, says: str) -> None:
    tree = ast.parse(source)
    found = [
        *private_attributes("<example>", tree),
        *private_imports("<example>", tree),
        *subclass_reaches("<example>", tree),
    ]
    assert [use for use in found if says in use.rule], found


def test_a_subclass_may_keep_state_of_its_own() -> None:
    tree = ast.parse(
        "from redis.asyncio import ConnectionPool\n"
        "class Pool(ConnectionPool):\n"
        "    def __init__(self):\n"
        "        self._handed_out = set()\n"
    )
    assert list(subclass_reaches("<example>", tree)) == []
