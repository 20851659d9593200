"""Mutation scoring of the conformance kit: how many small, unpicked bugs in a storage it catches.

``python -m bench.mutation [--target NAME ...] [--sample N --seed S] [--clauses FAMILY ...]
[--json PATH] [--markdown PATH]``

A mutant is the source of a target module with one small change (the operators below). Each is
compiled and executed into a fresh module object (never written anywhere, never put in
``sys.modules``), the target's storage is built from that module, and the kit runs on it
(``conformance.validate`` on a :class:`~conformance.StorageTarget` with a short
``operation_timeout``). A mutant is *killed* when any clause FAILED or the run errored (a mutant
that breaks the module's import or construction is killed too: the storage could not be used),
*timeout* when its run passed the hard bound (counted as killed, noted), else it *survived*.
Every mutant runs in a child process of its own (``--child``), so one that spins forever in
synchronous code, which no ``asyncio`` deadline can interrupt, is ended by the parent and costs
one bound. Survivors judged equivalent (no behaviour the contract can see changes) are listed
with a one-line reason in bench/mutation_survivors.json; the score is killed over mutants that
are not on that list.

Targets (``--target``):

* ``dict``: examples/dict_storage.py, the worked example of a third-party ``Backend``;
* ``memory``: storages/memory/backend.py, the built-in in-memory backend (its storage class is the
  engine over the mutated ``MemoryBackend``, with the codec ``InMemoryCheckpointStorage`` uses);
* ``wrapper``: bench/mutation_targets/delegating.py, a wrapper forwarding every call to an
  ``InMemoryCheckpointStorage``;
* ``six``: bench/mutation_targets/six_methods.py, MAF's six methods over dicts.

Operators: comparison swaps (``==``/``!=``, ``<``/``<=``, ``>``/``>=``, ``is``/``is not``,
``in``/``not in``), ``and``/``or``, ``+``/``-`` (binary and augmented), ``True``/``False``,
integers ±1, a statement that is a call replaced by ``pass``, ``return x`` by ``return None``,
``not x`` by ``x``, ``break``/``continue``.

Why a mutator of our own and not cosmic-ray 8.7.0: its operators are reachable in-process
(``cosmic_ray.plugins.get_operator``, parso trees), but applying one goes through
``cosmic_ray.mutating.use_mutation``, which rewrites the module's file on disk, and a run is a
session (a config file, a SQLite session database, a worker per test command); it has no
operator that removes a call statement or empties a ``return``; and it would bring about twenty
packages (aiohttp, SQLAlchemy, GitPython, ...) into the ``core`` CI lane that runs the fixed
sample (tests/test_mutation_sample.py). The standard library's ``ast`` does the job in ~200 lines.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import random
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SURVIVORS = Path(__file__).resolve().parent / "mutation_survivors.json"
RESULTS = Path(__file__).resolve().parent / "mutation_results.json"
OPERATION_TIMEOUT = 5.0
"""Seconds one storage call of a mutant may take before the kit calls the storage stuck."""
CHILD_TIMEOUT = 60.0
"""Seconds a mutant's whole kit run may take before the parent ends it (outcome ``timeout``): a
healthy run of every family takes under 10 s here, so six times that even on a loaded machine."""
MARKERS = ("<!-- mutation:start -->", "<!-- mutation:end -->")

# ---------------------------------------------------------------------- operators

_COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_ARITH_SWAPS: dict[type[ast.operator], type[ast.operator]] = {ast.Add: ast.Sub, ast.Sub: ast.Add}
_SYMBOLS = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Add: "+",
    ast.Sub: "-",
    ast.And: "and",
    ast.Or: "or",
}


@dataclass(frozen=True)
class Mutation:
    """One change: the ``variant``-th mutation of the ``node``-th node of ``ast.walk`` order."""

    node: int
    variant: int
    operator: str
    line: int
    column: int
    change: str

    @property
    def key(self) -> str:
        """Stable while the module's text is: what the equivalents list names."""
        return f"L{self.line}:{self.column} {self.operator} {self.change}"


Apply = Callable[[ast.AST, dict[ast.AST, ast.AST]], None]


def _variants(node: ast.AST) -> Iterator[tuple[str, str, Apply]]:
    """(operator, change, how to apply it) for each mutation of ``node``."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            swap = _COMPARE_SWAPS.get(type(op))
            if swap is not None:

                def compare(n: ast.AST, _: Any, i: int = i, swap: type[ast.cmpop] = swap) -> None:
                    assert isinstance(n, ast.Compare)
                    n.ops[i] = swap()

                yield "compare", f"{_SYMBOLS[type(op)]} -> {_SYMBOLS[swap]}", compare
    elif isinstance(node, ast.BoolOp):
        other: type[ast.boolop] = ast.Or if isinstance(node.op, ast.And) else ast.And

        def boolean(n: ast.AST, _: Any, other: type[ast.boolop] = other) -> None:
            assert isinstance(n, ast.BoolOp)
            n.op = other()

        yield "boolean", f"{_SYMBOLS[type(node.op)]} -> {_SYMBOLS[other]}", boolean
    elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _ARITH_SWAPS:
        arith = _ARITH_SWAPS[type(node.op)]

        def arithmetic(n: ast.AST, _: Any, arith: type[ast.operator] = arith) -> None:
            assert isinstance(n, ast.BinOp | ast.AugAssign)
            n.op = arith()

        name = "augmented" if isinstance(node, ast.AugAssign) else "arithmetic"
        yield name, f"{_SYMBOLS[type(node.op)]} -> {_SYMBOLS[arith]}", arithmetic
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):

        def flip(n: ast.AST, _: Any) -> None:
            assert isinstance(n, ast.Constant)
            n.value = not n.value

        yield "constant", f"{node.value} -> {not node.value}", flip
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        for shifted in (node.value + 1, node.value - 1):

            def shift(n: ast.AST, _: Any, shifted: int = shifted) -> None:
                assert isinstance(n, ast.Constant)
                n.value = shifted

            yield "number", f"{node.value} -> {shifted}", shift
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call | ast.Await):

        def remove(n: ast.AST, parents: dict[ast.AST, ast.AST]) -> None:
            _replace_statement(n, parents, ast.Pass())

        yield "remove-call", f"{ast.unparse(node)[:40]} -> pass", remove
    elif isinstance(node, ast.Return) and node.value is not None and not _is_none(node.value):

        def empty(n: ast.AST, _: Any) -> None:
            assert isinstance(n, ast.Return)
            n.value = ast.Constant(None)

        yield "return-none", f"{ast.unparse(node)[:40]} -> return None", empty
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):

        def drop_not(n: ast.AST, parents: dict[ast.AST, ast.AST]) -> None:
            assert isinstance(n, ast.UnaryOp)
            _replace_expression(n, parents, n.operand)

        yield "not", "not x -> x", drop_not
    elif isinstance(node, ast.Break | ast.Continue):
        swapped: type[ast.stmt] = ast.Continue if isinstance(node, ast.Break) else ast.Break

        def loop(n: ast.AST, parents: dict[ast.AST, ast.AST], swapped: type[ast.stmt] = swapped) -> None:
            _replace_statement(n, parents, swapped())

        yield "loop", f"{type(node).__name__.lower()} -> {swapped.__name__.lower()}", loop


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _replace_statement(node: ast.AST, parents: dict[ast.AST, ast.AST], new: ast.stmt) -> None:
    parent = parents[node]
    for _, value in ast.iter_fields(parent):
        if isinstance(value, list) and node in value:
            value[value.index(node)] = new
            return
    raise ValueError(f"statement at line {getattr(node, 'lineno', '?')} is not in a body")


def _replace_expression(node: ast.AST, parents: dict[ast.AST, ast.AST], new: ast.expr) -> None:
    parent = parents[node]
    for name, value in ast.iter_fields(parent):
        if value is node:
            setattr(parent, name, new)
            return
        if isinstance(value, list) and node in value:
            value[value.index(node)] = new
            return
    raise ValueError(f"expression at line {getattr(node, 'lineno', '?')} has no parent field")


def _skipped(tree: ast.Module) -> set[ast.AST]:
    """Nodes no mutation touches: annotations (never evaluated under ``from __future__ import
    annotations``), docstrings, imports and ``__all__``."""
    skipped: set[ast.AST] = set()
    for node in ast.walk(tree):
        annotations: list[ast.AST | None] = []
        if isinstance(node, ast.AnnAssign | ast.arg):
            annotations.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotations.append(node.returns)
        elif isinstance(node, ast.Import | ast.ImportFrom) or _assigns_all(node):
            annotations.append(node)
        for annotation in annotations:
            if annotation is not None:
                skipped.update(ast.walk(annotation))
    return skipped


def _assigns_all(node: ast.AST) -> bool:
    return isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
    )


def mutations(source: str) -> list[Mutation]:
    """Every mutation of ``source``, in a fixed order (``ast.walk``'s)."""
    tree = ast.parse(source)
    skipped = _skipped(tree)
    found: list[Mutation] = []
    for index, node in enumerate(ast.walk(tree)):
        if node in skipped:
            continue
        for variant, (operator, change, _) in enumerate(_variants(node)):
            line, column = getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
            found.append(Mutation(index, variant, operator, line, column, change))
    return found


def mutate(source: str, mutation: Mutation) -> str:
    """``source`` with ``mutation`` applied."""
    tree = ast.parse(source)
    nodes = list(ast.walk(tree))
    parents = {child: parent for parent in nodes for child in ast.iter_child_nodes(parent)}
    node = nodes[mutation.node]
    _, _, apply = list(_variants(node))[mutation.variant]
    apply(node, parents)
    return ast.unparse(ast.fix_missing_locations(tree))


# ---------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """A module to mutate and how to build a kit target from (a mutant of) it."""

    name: str
    path: str
    """Relative to the repository root."""
    module: str
    """The dotted name the module is executed under (relative imports resolve from it)."""
    build: Callable[[types.ModuleType], Any]
    """The mutated module -> a StorageTarget."""

    def source(self) -> str:
        return (ROOT / self.path).read_text(encoding="utf-8")


def load_module(target: Target, source: str) -> types.ModuleType:
    """``source`` executed as a fresh module named like ``target.module`` (not in sys.modules
    afterwards; dataclasses need it there while the class bodies run)."""
    module = types.ModuleType(target.module)
    module.__package__ = target.module.rpartition(".")[0]
    module.__file__ = str(ROOT / target.path)
    previous = sys.modules.get(target.module)
    sys.modules[target.module] = module
    try:
        exec(compile(source, f"<mutant of {target.path}>", "exec"), module.__dict__)
    finally:
        if previous is None:
            del sys.modules[target.module]
        else:
            sys.modules[target.module] = previous
    return module


def _dict_target(module: types.ModuleType) -> Any:
    from conformance import StorageTarget

    root = module.DictCheckpointStorage()
    return StorageTarget("dict", root.new_handle)


def _memory_target(module: types.ModuleType) -> Any:
    from conformance import StorageTarget
    from storages.codec import CheckpointCodec
    from storages.engine import CheckpointStore

    root: Any = CheckpointStore(module.MemoryBackend(), codec=CheckpointCodec(trust_saved_types=True))
    return StorageTarget("memory", root.new_handle)


def _wrapper_target(module: types.ModuleType) -> Any:
    from conformance import StorageTarget

    root = module.DelegatingStorage()
    return StorageTarget("wrapper", root.new_handle)


def _six_target(module: types.ModuleType) -> Any:
    from conformance import StorageTarget

    shelf = module.Shelf()
    return StorageTarget("six", lambda: module.SixMethodStorage(shelf), capabilities=frozenset())


TARGETS = {
    t.name: t
    for t in (
        Target("dict", "examples/dict_storage.py", "examples.dict_storage", _dict_target),
        Target("memory", "storages/memory/backend.py", "storages.memory.backend", _memory_target),
        Target(
            "wrapper",
            "bench/mutation_targets/delegating.py",
            "bench.mutation_targets.delegating",
            _wrapper_target,
        ),
        Target(
            "six", "bench/mutation_targets/six_methods.py", "bench.mutation_targets.six_methods", _six_target
        ),
    )
}


# ---------------------------------------------------------------------- running


@dataclass
class Verdict:
    """What the kit made of one mutant (or of the unmutated module: ``mutation`` None)."""

    target: str
    mutation: Mutation | None
    outcome: str
    """``killed``, ``survived``, ``timeout``, or ``equivalent`` (survived, on the list)."""
    detail: str = ""
    """The first failed clause and its message, the error, or the equivalence reason."""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        found = dataclasses.asdict(self)
        found["key"] = None if self.mutation is None else self.mutation.key
        return found


def run_kit(target: Target, source: str, clauses: Sequence[str] | None) -> tuple[str, str]:
    """Runs the kit on the storage built from ``source``: (``killed``/``survived``, detail)."""
    from conformance import Outcome, validate

    try:
        module = load_module(target, source)
        kit_target = dataclasses.replace(target.build(module), operation_timeout=OPERATION_TIMEOUT)
    except Exception as exc:  # a mutant that cannot even be built is a storage that does not work
        return "killed", f"build: {type(exc).__name__}: {exc}"
    (backend,) = validate(kit_target, clauses=list(clauses) if clauses else None).backends
    if backend.error:
        return "killed", f"error: {backend.error}"[:300]
    for result in backend.results:
        if result.outcome is Outcome.FAILED:
            return "killed", f"{result.clause_id}: {result.message}"[:300]
    return "survived", ""


def run_mutant(
    target: Target, mutation: Mutation | None, clauses: Sequence[str] | None, timeout: float = CHILD_TIMEOUT
) -> Verdict:
    """One mutant (None: the module as it is) in a child process bounded by ``timeout`` seconds."""
    command = [sys.executable, "-m", "bench.mutation", "--child", target.name]
    if mutation is not None:
        command += ["--mutant", f"{mutation.node}:{mutation.variant}"]
    for family in clauses or ():
        command += ["--clauses", family]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Verdict(target.name, mutation, "timeout", f"no verdict within {timeout:.0f} s", timeout)
    seconds = time.perf_counter() - started
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Verdict(
            target.name, mutation, "killed", f"child exited {done.returncode}: {tail}"[:300], seconds
        )
    answer = json.loads(lines[-1])
    return Verdict(target.name, mutation, answer["outcome"], answer["detail"], seconds)


def survivors() -> dict[str, dict[str, dict[str, str]]]:
    """target -> mutation key -> {"verdict": "equivalent" or "gap", "why": one line}: every survivor
    judged so far (bench/mutation_survivors.json)."""
    found: dict[str, dict[str, dict[str, str]]] = json.loads(SURVIVORS.read_text(encoding="utf-8"))
    return found


def equivalents() -> dict[str, dict[str, str]]:
    """target -> mutation key -> why the mutant is equivalent (no behaviour the contract sees changes)."""
    return {
        target: {key: judged["why"] for key, judged in found.items() if judged["verdict"] == "equivalent"}
        for target, found in survivors().items()
    }


def sample(target: Target, size: int | None, seed: int) -> list[Mutation]:
    """``size`` of the target's mutations, drawn with ``seed`` (all of them when ``size`` is None),
    in source order."""
    every = mutations(target.source())
    if size is None or size >= len(every):
        return every
    chosen = random.Random(f"{target.name}:{seed}").sample(range(len(every)), size)
    return [every[i] for i in sorted(chosen)]


def score(
    target: Target, chosen: Sequence[Mutation], clauses: Sequence[str] | None, *, progress: bool = True
) -> list[Verdict]:
    """Each of ``chosen`` run through the kit, survivors on the equivalents list marked so."""
    known = equivalents().get(target.name, {})
    verdicts = []
    for number, mutation in enumerate(chosen, 1):
        verdict = run_mutant(target, mutation, clauses)
        if verdict.outcome == "survived" and mutation.key in known:
            verdict = dataclasses.replace(verdict, outcome="equivalent", detail=known[mutation.key])
        verdicts.append(verdict)
        if progress:
            print(
                f"[{target.name} {number}/{len(chosen)}] {verdict.outcome:<10} {mutation.key} "
                f"({verdict.seconds:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
    return verdicts


def summary(verdicts: Sequence[Verdict]) -> dict[str, int | float]:
    counts = {
        o: sum(v.outcome == o for v in verdicts) for o in ("killed", "timeout", "survived", "equivalent")
    }
    judged = counts["killed"] + counts["timeout"] + counts["survived"]
    killed = counts["killed"] + counts["timeout"]
    return {**counts, "mutants": len(verdicts), "score": round(100 * killed / judged, 1) if judged else 100.0}


def markdown(by_target: dict[str, list[Verdict]], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "| target | mutants | killed | timeout | equivalent | survived | score (% of non-equivalent) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, verdicts in by_target.items():
        s = summary(verdicts)
        lines.append(
            f"| {name} | {s['mutants']} | {s['killed']} | {s['timeout']} | {s['equivalent']} | "
            f"{s['survived']} | {s['score']} |"
        )
    rest = [v for verdicts in by_target.values() for v in verdicts if v.outcome in ("survived", "equivalent")]
    if rest:
        judged = survivors()
        lines += ["", "| target | mutant | verdict | why |", "|---|---|---|---|"]
        for v in rest:
            assert v.mutation is not None
            gap = judged.get(v.target, {}).get(v.mutation.key, {"why": "not judged yet"})["why"]
            verdict, why = ("equivalent", v.detail) if v.outcome == "equivalent" else ("kit gap", gap)
            lines.append(f"| {v.target} | `{v.mutation.key}` | {verdict} | {why} |")
    return "\n".join(lines)


def _child(name: str, mutant: str | None, clauses: Sequence[str] | None) -> int:
    target = TARGETS[name]
    source = target.source()
    if mutant is not None:
        node, variant = (int(part) for part in mutant.split(":"))
        (mutation,) = [m for m in mutations(source) if (m.node, m.variant) == (node, variant)]
        source = mutate(source, mutation)
    outcome, detail = run_kit(target, source, clauses)
    print(json.dumps({"outcome": outcome, "detail": detail}), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mutation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", choices=sorted(TARGETS), help="repeatable; default: all")
    parser.add_argument("--sample", type=int, help="mutants per target, drawn with --seed (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clauses", action="append", help="a clause family or id; repeatable; default: all")
    parser.add_argument("--json", type=Path, help="write every verdict here")
    parser.add_argument("--markdown", type=Path, help="write the table into this document's mutation section")
    parser.add_argument(
        "--rejudge",
        type=Path,
        action="append",
        help="run nothing: read the verdicts of earlier --json files (repeatable), judge survivors again "
        "against bench/mutation_survivors.json",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mutant", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child, args.mutant, args.clauses)
    if args.rejudge:
        return _write(*rejudged(args.rejudge), args.json, args.markdown)
    names = args.target or list(TARGETS)
    by_target: dict[str, list[Verdict]] = {}
    for name in names:
        target = TARGETS[name]
        baseline = run_mutant(target, None, args.clauses)
        if baseline.outcome != "survived":
            print(f"{name}: the unmutated module fails the kit: {baseline.detail}", file=sys.stderr)
            return 1
        by_target[name] = score(target, sample(target, args.sample, args.seed), args.clauses)
    command = "python -m bench.mutation " + " ".join(
        [f"--target {n}" for n in names]
        + ([f"--sample {args.sample} --seed {args.seed}"] if args.sample else [])
        + [f"--clauses {c}" for c in args.clauses or ()]
    )
    return _write(by_target, command, args.json, args.markdown)


def rejudged(paths: Sequence[Path]) -> tuple[dict[str, list[Verdict]], str]:
    """The verdicts earlier ``--json`` runs wrote, survivors judged against today's survivors list,
    and the runs' commands joined by ``;``."""
    payloads = [json.loads(path.read_text(encoding="utf-8")) for path in paths]
    known = equivalents()
    by_target: dict[str, list[Verdict]] = {}
    for name, found in ((n, f) for p in payloads for n, f in p["targets"].items()):
        verdicts = by_target[name] = []
        for entry in found["verdicts"]:
            mutation = Mutation(**entry["mutation"])
            outcome, detail = entry["outcome"], entry["detail"]
            if outcome in ("survived", "equivalent"):
                reason = known.get(name, {}).get(mutation.key)
                outcome, detail = ("survived", "") if reason is None else ("equivalent", reason)
            verdicts.append(Verdict(name, mutation, outcome, detail, entry["seconds"]))
    return by_target, "; ".join(str(p["command"]) for p in payloads)


def _write(
    by_target: dict[str, list[Verdict]], command: str, json_path: Path | None, md_path: Path | None
) -> int:
    text = markdown(by_target, command)
    print(text)
    if json_path:
        payload = {
            "command": command,
            "targets": {
                n: {"summary": summary(v), "verdicts": [x.to_dict() for x in v]} for n, v in by_target.items()
            },
        }
        json_path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    if md_path:
        from .sections import replace_section

        document = md_path.read_text(encoding="utf-8") if md_path.exists() else ""
        md_path.write_text(replace_section(document, text, *MARKERS, "## Mutation score"), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
