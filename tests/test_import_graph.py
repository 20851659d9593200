"""No import cycles in storages/, conformance/ or bench/, read from the source with ast (nothing imported).

Three graphs: imports a module runs when it is imported (module level, ``if TYPE_CHECKING:``
blocks left out, since they never run); those plus the imports inside functions (deferred
imports); and those plus the ``if TYPE_CHECKING:`` imports (type-level). A cycle in the first
breaks or half-initialises a module depending on which end is imported first; a cycle in the
others is a design knot (two modules that each need the other, at run time or to be typed).
All three must be empty. An edge goes to the module named, not to its parent packages' ``__init__``.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("storages", "conformance", "bench")

KNOWN_CYCLES: dict[str, str] = {}
"""Cycle (its modules, sorted, joined by " <-> ") -> why it is still there. Empty is the goal."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, *, deferred: bool, typing: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run at import time, or (deferred) those inside functions too, or
    (typing) those under ``if TYPE_CHECKING:`` too."""
    pending: list[tuple[ast.AST, bool]] = [(tree, False)]
    while pending:
        node, in_function = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and (deferred or not in_function):
                yield child
            elif isinstance(child, ast.If) and _is_type_checking(child.test) and not typing:
                pending.extend((grand, in_function) for grand in child.orelse)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                pending.append((child, True))
            else:
                pending.append((child, in_function))


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in known}
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, node.module] if node.module else base)
    else:
        source = node.module or ""
    found = set()
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        if submodule in known:
            found.add(submodule)
        elif source in known:
            found.add(source)
    return found


@functools.cache
def _parsed(path: Path) -> ast.Module:
    # Read once per session: the tests here build several graphs of the same tree.
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def import_graph(*, deferred: bool, typing: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = _parsed(path)
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _imports(tree, deferred=deferred, typing=typing):
            edges |= _targets(module, is_package, node, known)
        graph[module] = edges - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _named(component: frozenset[str]) -> str:
    return " <-> ".join(sorted(component))


@pytest.mark.parametrize(
    ("deferred", "typing"),
    [(False, False), (True, False), (True, True)],
    ids=["module-level", "with-deferred", "type-level"],
)
def test_no_import_cycles(deferred: bool, typing: bool) -> None:
    found = {_named(component) for component in cycles(import_graph(deferred=deferred, typing=typing))}
    unexpected = sorted(found - set(KNOWN_CYCLES))
    assert not unexpected, "import cycles:\n" + "\n".join(unexpected)


def test_known_cycles_are_still_there() -> None:
    # A fixed cycle must leave KNOWN_CYCLES, so the list never hides a new one with an old name.
    graphs = [
        import_graph(deferred=deferred, typing=typing)
        for deferred in (False, True)
        for typing in (False, True)
    ]
    found = {_named(component) for graph in graphs for component in cycles(graph)}
    assert set(KNOWN_CYCLES) <= found, sorted(set(KNOWN_CYCLES) - found)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_relative_and_deferred_imports() -> None:
    eager, lazy = import_graph(deferred=False), import_graph(deferred=True)
    assert "storages.contract" in eager["storages.records"]  # from .contract import ...
    assert "storages.engine" not in eager["storages.registry"]  # imported inside open()
    assert "storages.engine" in lazy["storages.registry"]


def test_the_type_level_graph_sees_type_checking_imports() -> None:
    plain, typed = import_graph(deferred=True), import_graph(deferred=True, typing=True)
    assert "conformance.context" not in plain["conformance.clause"]  # only under TYPE_CHECKING
    assert "conformance.context" in typed["conformance.clause"]


def _shims() -> set[str]:
    """The old import paths (tests/test_moved_paths.py), each handing on a module of a higher
    floor: told by their docstring's first words."""
    return {
        module
        for module, path in _modules().items()
        if (ast.get_docstring(_parsed(path)) or "").startswith("The old name of")
    }


def _unit(module: str) -> str:
    """The part of storages/ a module belongs to: its sub-package (storages.engine, storages.redis,
    storages.tools.cli, ...) or, at the top, the module itself."""
    parts = module.split(".")
    depth = 3 if parts[:2] in (["storages", "tools"], ["storages", "runners"]) else 2
    return ".".join(parts[:depth])


def test_no_cycle_between_the_parts_of_storages() -> None:
    # A cycle between folders (the engine importing a module that imports the engine back) is no
    # module cycle, yet no folder then stands above the other: the layout stops showing the design.
    graph = import_graph(deferred=True, typing=True)
    shims = _shims()
    parts: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if not module.startswith("storages.") or module in shims:
            continue
        unit = _unit(module)
        edges = parts.setdefault(unit, set())
        edges.update(_unit(t) for t in targets if t.startswith("storages.") and t not in shims)
        edges.discard(unit)
    assert [_named(component) for component in cycles(parts)] == []


ARCHITECTURE = ROOT / "docs" / "architecture.md"

Room = tuple[str, int, tuple[str, ...], set[str]]
"""A row of docs/architecture.md's rooms table: name, floor, module names, rooms it imports from."""


def _documented_rooms() -> list[Room]:
    """docs/architecture.md's rooms table: (room, floor, module names, rooms it imports from)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table = text.split("<!-- rooms:start -->", 1)[1].split("<!-- rooms:end -->", 1)[0]
    rooms = []
    for line in table.strip().splitlines()[2:]:
        room, floor, modules, imports = (cell.strip() for cell in line.strip().strip("|").split("|"))
        names = tuple(name.strip().strip("`") for name in modules.split(","))
        rooms.append((room, int(floor), names, {name.strip() for name in imports.split(",") if name.strip()}))
    return rooms


def _room_of(module: str, rooms: list[Room]) -> str | None:
    """The room listing the module's own name or its longest listed parent."""
    best: tuple[int, str] | None = None
    for room, _, names, _ in rooms:
        for name in names:
            if (module == name or module.startswith(name + ".")) and (best is None or len(name) > best[0]):
                best = (len(name), room)
    return None if best is None else best[1]


def _room_arrows(rooms: list[Room]) -> dict[str, set[str]]:
    graph = import_graph(deferred=True, typing=True)
    arrows: dict[str, set[str]] = {room: set() for room, *_ in rooms}
    for module, targets in graph.items():
        source = _room_of(module, rooms)
        assert source is not None
        arrows[source].update(
            room for target in targets if (room := _room_of(target, rooms)) not in (None, source)
        )
    return arrows


def test_every_module_has_exactly_one_room_in_the_architecture_drawing() -> None:
    rooms = _documented_rooms()
    listed = [name for _, _, names, _ in rooms for name in names]
    assert len(listed) == len(set(listed)), "a name is listed in two rooms"
    assert [module for module in sorted(_modules()) if _room_of(module, rooms) is None] == []
    # Every listed name is a module or package of the tree: a stale name never hides a new one.
    modules = _modules()
    assert [name for name in listed if not any(m == name or m.startswith(name + ".") for m in modules)] == []


def test_the_architecture_drawing_is_the_import_graph_between_rooms() -> None:
    rooms = _documented_rooms()
    documented = {room: imports for room, _, _, imports in rooms}
    assert _room_arrows(rooms) == documented


def test_every_arrow_between_rooms_runs_down_a_floor() -> None:
    rooms = _documented_rooms()
    floors = {room: floor for room, floor, _, _ in rooms}
    upward = sorted(
        f"{room} -> {target}"
        for room, floor, _, imports in rooms
        for target in imports
        if floors[target] >= floor
    )
    assert upward == []


def test_the_room_check_sees_an_arrow_the_drawing_does_not_list() -> None:
    rooms: list[Room] = [(room, floor, names, set()) for room, floor, names, _ in _documented_rooms()]
    arrows = _room_arrows(rooms)
    assert "core" in arrows["backends"]  # every backend imports the contract
    assert arrows != {room: imports for room, _, _, imports in rooms}
