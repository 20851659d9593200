"""Operation programs: what the model family asks a storage to do, drawn from a seed.

A program is a list of :class:`Op`. It is generated before anything runs, against a model of its
own, so the same seed always gives the same program whatever the storage answers (the storage is
judged afterwards, op by op, against the reference model). Generation covers by construction the
settings example clauses never vary:

* several handles (``new_handle()``) and a storage rebuilt from its settings, where declared;
* workflow names and ids drawn to collide: one sharing a prefix, differing by case, Unicode
  normalisation (NFC and NFD), a trailing space, or carrying key delimiters (``:``, ``/``, ``{}``,
  ``*``);
* several graph signatures per workflow;
* values of the codec's whole domain in every field, and checkpoints embedded three deep, aliased;
* forks, dangling and pruned previous ids, deletes and re-saves of deleted ids, equal and
  different re-saves, fenced saves with fresh and stale expectations, invalid ids and fields;
* pending writes with special (negative) indexes replacing earlier ones.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from storages.contract import Capability

from .execute import apply
from .ops import Op
from .spec import ContractModel, Draft, Embedded, Write, with_changes
from .values import copy_value, draw_mapping, draw_value

DEFAULT_MAX_DEPTH = 100_000


# Suffixes that collide with "flow" in the ways broken key schemes confuse: case, normalisation,
# trailing space, a shared prefix, and characters that are delimiters somewhere.
_WORKFLOW_SUFFIXES = (
    "flow",
    "Flow",
    "flow ",
    "flo",
    "flowé",
    "flowe\u0301",
    "flow:1",
    "flow/1",
    "flow{1}",
    "flow*",
    "flow%2F1",
    "flow-" + "w" * 230,  # with the prefix, the longest name the contract accepts
)
_CHILD_SUFFIXES = ("child", "Child", "child ", "flow")
_SIGNATURES = ("sig-a", "sig-b", "SIG-A", "sig-a ", "sig-ü/日本🙂")
_LARGE_VALUES = (bytes(range(256)) * 800, "é" * 70_000, list(range(20_000)), bytearray(b"\x00") * 70_000)
"""Values past 64 KiB: where a column type, a frame or a page size changes."""
_WRITES = frozenset(
    {"save", "save_fenced", "delete", "prune", "delete_workflow", "put_writes", "delete_writes"}
)
_ID_DECORATIONS = ("", "", "", "", "X", " ", "é", "e\u0301", ":k", "/..", "{t}", "%2F", "?q#f", "\\")


class Namer:
    """Names and ids of one program, all starting with ``ck-m<tag>-`` so runs never meet."""

    def __init__(self, tag: str) -> None:
        self.prefix = f"ck-m{tag}-"
        self.counter = 0

    def workflow(self, suffix: str) -> str:
        return (self.prefix + suffix)[:256]

    def new_id(self, rng: random.Random) -> str:
        self.counter += 1
        made = f"{self.prefix}c{self.counter}{rng.choice(_ID_DECORATIONS)}"
        if rng.random() < 0.03:
            made = (made + "-").ljust(256, "z")  # the longest id the contract accepts
        return made

    def twin_of(self, checkpoint_id: str, rng: random.Random) -> str:
        """An id that differs from a stored one only the way a broken key scheme might confuse:
        case, Unicode normalisation, a trailing space, a shared prefix."""
        if "é" in checkpoint_id and rng.random() < 0.6:
            return checkpoint_id.replace("é", "e\u0301")
        if "e\u0301" in checkpoint_id and rng.random() < 0.6:
            return checkpoint_id.replace("e\u0301", "é")
        if "/" in checkpoint_id and rng.random() < 0.5:
            return checkpoint_id.replace("/", "%2F", 1)  # what a URL-decoding key scheme merges
        if "%2F" in checkpoint_id and rng.random() < 0.5:
            return checkpoint_id.replace("%2F", "/", 1)
        twins = [checkpoint_id + " ", checkpoint_id + "0", checkpoint_id[:-1] + "X"]
        if checkpoint_id.endswith(" "):
            twins.append(checkpoint_id.rstrip(" "))
        body = checkpoint_id[len(self.prefix) :]
        if "c" in body:
            twins.append(self.prefix + body.replace("c", "C", 1))
        if len(body) > 2:
            twins.append(checkpoint_id[:-1])
        return rng.choice(twins)


@dataclass
class Settings:
    """What the program may use, from the storage's declared capabilities."""

    capabilities: frozenset[Capability]
    handles: int = 1
    rebuild: bool = False
    load_signature: bool = False
    """load() takes expected_graph_signature_hash (detected from its signature)."""

    def has(self, capability: Capability) -> bool:
        return capability in self.capabilities


class Generator:
    """Draws programs for one storage from one seed."""

    def __init__(self, settings: Settings, seed: int, tag: str) -> None:
        self.settings = settings
        self.rng = random.Random(seed)  # noqa: S311 - reproducible draws, not secrets
        self.names = Namer(tag)
        self.model = ContractModel(nested=settings.has(Capability.NESTED))
        rng = self.rng
        workflows = ["flow", *rng.sample(_WORKFLOW_SUFFIXES[1:], 3)]
        self.workflows = [self.names.workflow(s) for s in workflows]
        self.children = [self.names.workflow(s) for s in _CHILD_SUFFIXES]
        self.signatures = {
            name: ["sig-a", *rng.sample(_SIGNATURES[1:], 2)] for name in self.workflows + self.children
        }
        self.saved: list[Draft] = []
        self.embedded_ids: list[str] = []
        self.embeds = True
        self.swarm = [1.0]
        self.save_share = 0.42
        self.drawn = 0
        self.put_calls: list[Op] = []
        self.write_keys: list[tuple[str, str]] = []
        self.recent: list[str] = []
        """Ids the last calls touched: bugs live where one call meets what another just did
        (a cache, a delete on another handle), so reads and deletes come back to them often."""

    # ---------------------------------------------------------------- helpers

    def _apply(self, op: Op) -> None:
        apply(self.model, op)

    def _handle(self) -> int:
        return self.rng.randrange(self.settings.handles) if self.settings.handles > 1 else 0

    def _known_ids(self) -> list[str]:
        return list(self.model.records)

    def _any_id(self) -> str:
        rng = self.rng
        known = self._known_ids()
        if self.recent and rng.random() < 0.4:
            return rng.choice(self.recent)
        roll = rng.random()
        if known and roll < 0.7:
            return rng.choice(known)
        if self.saved and roll < 0.85:
            return str(rng.choice(self.saved).checkpoint_id)  # perhaps deleted or pruned since
        if known and roll < 0.95:
            return self.names.twin_of(rng.choice(known), rng)
        return self.names.new_id(rng)

    def _signature(self, workflow: str) -> str:
        return self.rng.choice(self.signatures.get(workflow, ["sig-a"]))

    def _values(self, draft_depth: int, embed: bool) -> dict[str, Any]:
        rng = self.rng
        fields: dict[str, Any] = {
            "messages": {
                f"exec-{i}": [draw_value(rng, 1) for _ in range(rng.randrange(3))]
                for i in range(rng.randrange(3))
            },
            "state": draw_mapping(rng, rng.randrange(4)),
            "pending_request_info_events": draw_mapping(rng, rng.randrange(2), depth=1),
            "metadata": draw_mapping(rng, rng.randrange(3), depth=1),
        }
        if embed and draft_depth < 3:
            self._embed(fields, draft_depth)
        if rng.random() < 0.04:
            # A large value: a body past the sizes where columns, frames and pages change.
            fields["state"]["large"] = rng.choice(_LARGE_VALUES)
        return fields

    def _embed(self, fields: dict[str, Any], depth: int) -> None:
        """Embed one or two checkpoints as a runner would (MAF: a sub-workflow's checkpoint at
        state['_executor_state'][executor]['sub_workflow_checkpoint']), and elsewhere."""
        rng = self.rng
        # A sub-workflow's checkpoint continues its own chain: its previous id is often an earlier
        # sub-workflow checkpoint (embedded before, a record of its own), so walks cross nesting.
        previous = rng.choice(self.embedded_ids) if self.embedded_ids and rng.random() < 0.4 else None
        child = Embedded(self._draft(rng.choice(self.children), previous=previous, depth=depth + 1))
        fields["state"]["_executor_state"] = {"sub": {"sub_workflow_checkpoint": child}}
        roll = rng.random()
        if roll < 0.2:
            fields["metadata"]["alias"] = child  # the same object twice
        elif roll < 0.4:
            other = Embedded(self._draft(rng.choice(self.children), previous=None, depth=depth + 1))
            where = rng.choice(("messages", "pending_request_info_events", "metadata"))
            if where == "messages":
                fields["messages"]["sub"] = [other]
            else:
                fields[where]["other"] = other

    def _draft(
        self,
        workflow: str,
        previous: str | None,
        depth: int = 0,
        checkpoint_id: str | None = None,
        *,
        embeds: bool = True,
    ) -> Draft:
        rng = self.rng
        embed = rng.random() < (0.35 if depth == 0 else 0.6) and embeds and self.embeds
        draft = Draft(
            workflow_name=workflow,
            graph_signature_hash=self._signature(workflow),
            checkpoint_id=checkpoint_id or self.names.new_id(rng),
            previous_checkpoint_id=previous,
            timestamp=rng.choice(
                (
                    "2024-01-01T00:00:00+00:00",
                    "2023-12-31T23:59:59.999999+00:00",
                    "2025-06-01T12:00:00Z",
                    "2024-01-01T09:00:00+09:00",
                    "2024-03-31 01:59:59",
                )
            ),
            iteration_count=rng.randrange(50),
            version=rng.choice(("1.0", "1.0", "1.0", "1.1")),
            **self._values(depth, embed),
        )
        if depth > 0:
            for embedded, _ in draft.embedded():
                self.embedded_ids.append(str(embedded.checkpoint_id))
            self.embedded_ids.append(str(draft.checkpoint_id))
        return draft

    # ---------------------------------------------------------------- ops

    def save_op(self) -> Op:
        rng = self.rng
        settings = self.settings
        roll = rng.random()
        workflow = rng.choice(self.workflows)
        fenced = settings.has(Capability.FENCING) and rng.random() < 0.25
        params: dict[str, Any] = {"mutate_after": rng.random() < 0.3}
        if self.saved and roll < 0.08:
            draft = rng.choice(self.saved)  # the same content again: a no-op, or a re-insert if deleted
        elif self.saved and roll < 0.14:
            base = rng.choice(self.saved)
            draft = with_changes(
                base,
                iteration_count=int(base.iteration_count) + 1 if type(base.iteration_count) is int else 1,
            )
        elif self.saved and roll < 0.17:
            base = rng.choice(self.saved)
            others = [w for w in self.workflows if w != base.workflow_name]
            draft = with_changes(base, workflow_name=rng.choice(others))
        elif roll < 0.21:
            draft = self._invalid_draft(workflow)
        elif roll < 0.29 and self.model.records:
            # A new checkpoint whose id is a near twin of a stored one: both must be kept apart.
            known = self._known_ids()
            accented = [i for i in known if "é" in i or "e\u0301" in i]
            original = rng.choice(accented if accented and rng.random() < 0.4 else known)
            twin = self.names.twin_of(original, rng)
            draft = self._draft(workflow, self._previous(workflow), checkpoint_id=twin)
        else:
            draft = self._draft(workflow, self._previous(workflow))
            if self.settings.has(Capability.NESTED) and self.embedded_ids and rng.random() < 0.05:
                reused = rng.choice(self._known_ids() or self.embedded_ids)
                draft.state["_executor_state"] = {
                    "again": {
                        "sub_workflow_checkpoint": Embedded(
                            self._draft(rng.choice(self.children), None, 1, reused)
                        )
                    }
                }
        if fenced:
            latest = (
                self.model.latest_id(str(draft.workflow_name))
                if isinstance(draft.workflow_name, str)
                else None
            )
            stale = [i for i in self._known_ids() if i != latest]
            params["expected_latest_id"] = (
                latest if (rng.random() < 0.6 or not stale) else rng.choice([*stale[:5], None])
            )
        params["draft"] = draft
        self.saved.append(draft)
        return Op("save_fenced" if fenced else "save", self._handle(), params)

    def _previous(self, workflow: str) -> str | None:
        rng = self.rng
        roll = rng.random()
        latest = self.model.latest_id(workflow)
        if roll < 0.65 and latest is not None:
            return latest
        if roll < 0.75:
            return None
        if roll < 0.88 and self.model.records:
            return rng.choice(self._known_ids())  # a fork, or a link into another workflow
        graves = sorted(self.model.all_tombstones())
        if roll < 0.94 and graves:
            return rng.choice(graves)
        return self.names.new_id(rng)  # dangling

    def _invalid_draft(self, workflow: str) -> Draft:
        rng = self.rng
        draft = self._draft(workflow, None)
        bad = rng.choice(
            (
                ("checkpoint_id", ""),
                ("checkpoint_id", self.names.prefix + "x" * 260),
                ("checkpoint_id", self.names.prefix + "nul\x00"),
                ("checkpoint_id", self.names.prefix + "lone\ud800"),
                ("checkpoint_id", 12345),
                ("workflow_name", ""),
                ("workflow_name", self.names.prefix + "tab\t"),
                ("previous_checkpoint_id", ""),
                ("previous_checkpoint_id", 7),
                ("iteration_count", "3"),
            )
        )
        changes: dict[str, Any] = {bad[0]: bad[1]}
        return replace(draft, **changes)

    def read_op(self) -> Op:
        rng = self.rng
        s = self.settings
        workflow = rng.choice(self.workflows + self.children[:2])
        signature = (
            self._signature(workflow) if s.has(Capability.SIGNATURE_FILTER) and rng.random() < 0.4 else None
        )
        nested = s.has(Capability.NESTED) and rng.random() < 0.4
        choices: list[tuple[float, Any]] = [
            (
                3,
                lambda: Op(
                    "load",
                    self._handle(),
                    {
                        "checkpoint_id": self._any_id(),
                        "signature": self._load_signature(),
                        "mutate_after": rng.random() < 0.3,
                    },
                ),
            ),
            (
                2,
                lambda: Op(
                    "get_latest",
                    self._handle(),
                    {"workflow": workflow, "signature": signature, "mutate_after": rng.random() < 0.2},
                ),
            ),
            (
                2,
                lambda: Op(
                    "list_checkpoint_ids",
                    self._handle(),
                    {"workflow": workflow, "signature": signature, "include_nested": nested},
                ),
            ),
            (
                1.5,
                lambda: Op(
                    "list_checkpoints",
                    self._handle(),
                    {
                        "workflow": workflow,
                        "signature": signature,
                        "include_nested": nested,
                        "mutate_after": rng.random() < 0.2,
                    },
                ),
            ),
            (1.5, lambda: Op("delete", self._handle(), {"checkpoint_id": self._delete_target()})),
        ]
        if s.has(Capability.ANCESTRY):
            choices.append(
                (
                    1.5,
                    lambda: Op(
                        "walk",
                        self._handle(),
                        {
                            "checkpoint_id": self._any_id(),
                            "max_depth": rng.choice((DEFAULT_MAX_DEPTH, DEFAULT_MAX_DEPTH, 1, 2, 3, 5)),
                            "bodies": rng.random() < 0.5,
                        },
                    ),
                )
            )
        if s.has(Capability.PRUNE):
            choices.append(
                (
                    0.5,
                    lambda: Op(
                        "prune",
                        self._handle(),
                        {
                            "workflow": rng.choice(self.workflows),
                            "keep_last": rng.choice((0, 1, 2, 3, 3, -1)),
                        },
                    ),
                )
            )
            choices.append(
                (
                    0.15,
                    lambda: Op("delete_workflow", self._handle(), {"workflow": rng.choice(self.workflows)}),
                )
            )
        if s.has(Capability.LIST_WORKFLOWS):
            choices.append((0.5, lambda: Op("list_workflows", self._handle(), {})))
        if s.has(Capability.NESTED):
            choices.append(
                (0.7, lambda: Op("list_nested", self._handle(), {"checkpoint_id": self._any_id()}))
            )
        if s.has(Capability.INSPECT):
            choices.append(
                (0.6, lambda: Op("checkpoint_info", self._handle(), {"checkpoint_id": self._any_id()}))
            )
            choices.append((0.4, lambda: Op("list_records", self._handle(), {"workflow": workflow})))
            choices.append(
                (0.3, lambda: Op("list_tombstones", self._handle(), {"workflow": rng.choice(self.workflows)}))
            )
        if s.has(Capability.PENDING_WRITES):
            choices.append((1.2, self._put_writes))
            choices.append((0.8, lambda: Op("list_writes", self._handle(), self._writes_target())))
            choices.append((0.3, lambda: Op("delete_writes", self._handle(), self._writes_target())))
            choices.append(
                (
                    0.3,
                    lambda: Op(
                        "list_workflow_writes", self._handle(), {"workflow": rng.choice(self.workflows)}
                    ),
                )
            )
        if s.rebuild:
            choices.append((0.25, lambda: Op("reopen")))
        weights = [w * self.swarm[i % len(self.swarm)] for i, (w, _) in enumerate(choices)]
        if not any(weights):
            weights = [w for w, _ in choices]
        return rng.choices([make for _, make in choices], weights)[0]()  # type: ignore[no-any-return]

    def _reswarm(self) -> None:
        """Swarm testing: each stretch of a program turns some kinds of call off and others up,
        so calls meet each other in proportions a fixed mix never reaches."""
        rng = self.rng
        self.swarm = [rng.choice((0.0, 1.0, 1.0, 4.0)) for _ in range(24)]
        self.save_share = rng.choice((0.3, 0.42, 0.55))

    def _load_signature(self) -> str | None:
        if not self.settings.load_signature or self.rng.random() > 0.25:
            return None
        return self.rng.choice(_SIGNATURES)

    def _delete_target(self) -> str:
        rng = self.rng
        top = [r.checkpoint_id for r in self.model.records.values() if r.container is None]
        nested = [r.checkpoint_id for r in self.model.records.values() if r.container is not None]
        roll = rng.random()
        if self.recent and roll < 0.25:
            return rng.choice(self.recent)
        if top and roll < 0.6:
            return rng.choice(top)
        if nested and roll < 0.75:
            return rng.choice(nested)
        return self._any_id()

    def _writes_target(self) -> dict[str, Any]:
        rng = self.rng
        top = [r for r in self.model.records.values() if r.container is None]
        if top and rng.random() < 0.8:
            record = rng.choice(top)
            return {"checkpoint_id": record.checkpoint_id, "workflow": record.workflow}
        if self.write_keys and rng.random() < 0.4:
            workflow, checkpoint_id = rng.choice(self.write_keys)  # perhaps pruned or deleted since
            return {"checkpoint_id": checkpoint_id, "workflow": workflow}
        keys = list(self.model.writes)
        if keys and rng.random() < 0.7:
            workflow, checkpoint_id = rng.choice(keys)
            return {"checkpoint_id": checkpoint_id, "workflow": workflow}
        return {"checkpoint_id": self._any_id(), "workflow": rng.choice(self.workflows)}

    def _put_writes(self) -> Op:
        rng = self.rng
        if self.put_calls and rng.random() < 0.12:
            again = rng.choice(self.put_calls)  # a retried call: it must change nothing
            return Op("put_writes", self._handle(), dict(again.params))
        writes = [
            Write(
                rng.choice(("task-1", "task-2", "Task-1")),
                rng.choice((0, 1, 2, -1, -3)),
                rng.choice(("ch", "__error__", "ch:2")),
                draw_value(rng, 1),
                rng.choice(("", "", "~sub")),
            )
            for _ in range(1 + rng.randrange(3))
        ]
        # One write per (task_id, index) in a call, as a runner makes them; repeats across calls.
        writes = list({(w.task_id, w.index): w for w in reversed(writes)}.values())
        if rng.random() < 0.05:
            writes.append(Write(rng.choice(("", 5)), 0, "ch", None))
        op = Op("put_writes", self._handle(), {**self._writes_target(), "writes": writes})
        self.put_calls.append(op)
        self.write_keys.append((op["workflow"], op["checkpoint_id"]))
        return op

    def next_op(self) -> Op:
        self.drawn += 1
        if self.drawn % 40 == 0:
            self._reswarm()
        op = self.save_op() if self.rng.random() < self.save_share else self.read_op()
        self._apply(op)
        self._remember(op)
        return op

    def _remember(self, op: Op) -> None:
        draft = op.params.get("draft")
        touched = draft.checkpoint_id if draft is not None else op.params.get("checkpoint_id")
        if isinstance(touched, str):
            self.recent = [*self.recent[-5:], touched]

    def program(self, count: int) -> list[Op]:
        """``count`` ops; most writes are followed by a read of what they wrote, on another handle
        where there are several (what a per-handle cache or a lagging replica gets wrong)."""
        ops: list[Op] = []
        echo = 0.6 if self.settings.handles > 1 else 0.35
        probes = self._probes()
        while len(ops) < count:
            if probes and self.rng.random() < 0.12:
                ops += self.rng.choice(probes)()  # each probe applies its ops as it draws them
                continue
            op = self.next_op()
            ops.append(op)
            if op.kind in _WRITES and self.rng.random() < echo:
                handles = self.settings.handles
                others = [h for h in range(handles) if h != op.handle] or [0]
                if op.kind in ("save", "save_fenced"):
                    others = [self.rng.choice(others)]
                # A removal is read back on every other handle: any of them may hold a stale copy.
                ops += [self._applied(self._echo(op, handle)) for handle in others]
        return ops

    def _probes(self) -> list[Any]:
        """Short scenarios aimed at where features meet, drawn among the generated calls."""
        s = self.settings
        probes: list[Any] = [self._resave_probe, self._large_value_probe]
        if s.has(Capability.NESTED):
            probes.append(self._nested_probe)
        if s.handles > 1:
            probes.append(self._cross_handle_probe)
        if s.has(Capability.PENDING_WRITES):
            probes.append(self._writes_probe)
        if s.has(Capability.PRUNE):
            probes.append(self._retention_probe)
        if s.has(Capability.SIGNATURE_FILTER):
            probes.append(self._signature_probe)
        return probes

    def _top(self) -> list[Any]:
        return [r for r in self.model.records.values() if r.container is None]

    def _draw_save(self, workflow: str) -> Op:
        draft = self._draft(workflow, self.model.latest_id(workflow))
        self.saved.append(draft)
        return Op("save", self._handle(), {"draft": draft, "mutate_after": False})

    def _large_value_probe(self) -> list[Op]:
        """A checkpoint holding a large value (past the sizes where columns, frames and pages
        change) in a field of its own, read back by id and as the latest."""
        rng = self.rng
        workflow = rng.choice(self.workflows)
        draft = self._draft(workflow, self.model.latest_id(workflow))
        field = rng.choice(("state", "metadata", "pending_request_info_events"))
        getattr(draft, field)["large"] = rng.choice(_LARGE_VALUES)
        self.saved.append(draft)
        read = {"checkpoint_id": draft.checkpoint_id, "signature": None, "mutate_after": False}
        return [
            self._applied(Op("save", self._handle(), {"draft": draft, "mutate_after": False})),
            self._applied(Op("load", self._handle(), read)),
            self._applied(
                Op(
                    "get_latest",
                    self._handle(),
                    {"workflow": workflow, "signature": None, "mutate_after": False},
                )
            ),
        ]

    def _resave_probe(self) -> list[Op]:
        """An older checkpoint saved again, equal: nothing moves (latest, order)."""
        rng = self.rng
        top = self._top()
        if not top:
            return [self.next_op()]
        record = rng.choice(top)
        listing = {"workflow": record.workflow, "signature": None, "include_nested": False}
        return [
            self._applied(Op("save", self._handle(), {"draft": record.draft, "mutate_after": False})),
            self._applied(Op("get_latest", self._handle(), {**listing, "mutate_after": False})),
            self._applied(Op("list_checkpoint_ids", self._handle(), listing)),
        ]

    def _nested_probe(self) -> list[Op]:
        """A checkpoint embedding others (three deep when the draw allows), then every view of
        each embedded one: load, info, its children, a walk, the listings of its workflow."""
        rng = self.rng
        workflow = rng.choice(self.workflows)
        draft = self._draft(workflow, self.model.latest_id(workflow))
        fields = {
            name: getattr(draft, name)
            for name in ("messages", "state", "pending_request_info_events", "metadata")
        }
        self._embed(fields, 0)
        self.saved.append(draft)
        ops = [self._applied(Op("save", self._handle(), {"draft": draft, "mutate_after": False}))]
        s = self.settings
        for embedded, _ in draft.embedded():
            checkpoint_id = embedded.checkpoint_id
            ops.append(
                self._applied(
                    Op(
                        "load",
                        self._handle(),
                        {"checkpoint_id": checkpoint_id, "signature": None, "mutate_after": False},
                    )
                )
            )
            ops.append(self._applied(Op("list_nested", self._handle(), {"checkpoint_id": checkpoint_id})))
            if s.has(Capability.INSPECT):
                ops.append(
                    self._applied(Op("checkpoint_info", self._handle(), {"checkpoint_id": checkpoint_id}))
                )
            if s.has(Capability.ANCESTRY):
                walk = {
                    "checkpoint_id": checkpoint_id,
                    "max_depth": DEFAULT_MAX_DEPTH,
                    "bodies": rng.random() < 0.5,
                }
                ops.append(self._applied(Op("walk", self._handle(), walk)))
            listing = {"workflow": embedded.workflow_name, "signature": None, "include_nested": True}
            ops.append(self._applied(Op("list_checkpoint_ids", self._handle(), listing)))
        ops.append(self._applied(Op("list_nested", self._handle(), {"checkpoint_id": draft.checkpoint_id})))
        embedded_ids = [str(e.checkpoint_id) for e, _ in draft.embedded()]
        if embedded_ids and s.has(Capability.ANCESTRY):
            # A sub-workflow restored from its embedded checkpoint continues from it: the chain
            # runs from a top-level checkpoint into nested records and on through their previous ids.
            child = rng.choice(embedded_ids)
            continued = self._draft(self.model.records[child].workflow, child)
            self.saved.append(continued)
            ops.append(self._applied(Op("save", self._handle(), {"draft": continued, "mutate_after": False})))
            for bodies in (False, True):
                walk = {
                    "checkpoint_id": continued.checkpoint_id,
                    "max_depth": DEFAULT_MAX_DEPTH,
                    "bodies": bodies,
                }
                ops.append(self._applied(Op("walk", self._handle(), walk)))
        if rng.random() < 0.4:
            ops.append(self._applied(Op("delete", self._handle(), {"checkpoint_id": draft.checkpoint_id})))
            for embedded, _ in draft.embedded()[:2]:
                ops.append(
                    self._applied(
                        Op(
                            "load",
                            self._handle(),
                            {
                                "checkpoint_id": embedded.checkpoint_id,
                                "signature": None,
                                "mutate_after": False,
                            },
                        )
                    )
                )
        return ops

    def _writes_probe(self) -> list[Op]:
        """Writes against a checkpoint, then what removes it (or them), then every read of writes."""
        rng = self.rng
        top = self._top()
        if not top:
            return [self.next_op()]
        record = rng.choice(top)
        key = {"checkpoint_id": record.checkpoint_id, "workflow": record.workflow}
        first = self._applied(self._put_writes_on(key))
        # The same tasks write again (a retried superstep, an interrupt rewritten): at a negative
        # index the new write replaces the old, at a non-negative one the first stays.
        rewritten = [
            Write(w.task_id, w.index, rng.choice(("ch", "__interrupt__")), draw_value(rng, 1), w.task_path)
            for w in first["writes"]
        ]
        again = Op("put_writes", self._handle(), {**key, "writes": rewritten})
        ops = [first, self._applied(again), self._applied(self._put_writes_on(key))]
        removal = rng.choice(("prune", "delete_workflow", "delete", "delete_writes", "none"))
        if removal == "prune":
            ops.append(
                self._applied(Op("prune", 0, {"workflow": record.workflow, "keep_last": rng.choice((0, 1))}))
            )
        elif removal == "delete_workflow":
            ops.append(self._applied(Op("delete_workflow", 0, {"workflow": record.workflow})))
        elif removal == "delete":
            ops.append(self._applied(Op("delete", 0, {"checkpoint_id": record.checkpoint_id})))
        elif removal == "delete_writes":
            ops.append(self._applied(Op("delete_writes", 0, dict(key))))
        ops.append(self._applied(Op("list_writes", self._handle(), dict(key))))
        ops.append(self._applied(Op("list_workflow_writes", self._handle(), {"workflow": record.workflow})))
        other = rng.choice([w for w in self.workflows if w != record.workflow])
        ops.append(
            self._applied(
                Op("list_writes", self._handle(), {"checkpoint_id": record.checkpoint_id, "workflow": other})
            )
        )
        return ops

    def _put_writes_on(self, key: dict[str, Any]) -> Op:
        op = self._put_writes()
        op.params.update(key)
        self.write_keys.append((key["workflow"], key["checkpoint_id"]))
        return op

    def _retention_probe(self) -> list[Op]:
        """A prune (then perhaps a delete of the whole workflow), then a walk from a survivor into
        what was pruned, the tombstones, the workflows, the list."""
        rng = self.rng
        workflow = rng.choice(self.workflows)
        ops = [self._applied(Op("prune", 0, {"workflow": workflow, "keep_last": rng.choice((1, 2))}))]
        if rng.random() < 0.5:
            ops.append(self._applied(Op("delete_workflow", self._handle(), {"workflow": workflow})))
            ops += [self._applied(self._draw_save(workflow)) for _ in range(2)]
        survivors = self.model.top_level(workflow)
        if survivors and self.settings.has(Capability.ANCESTRY):
            ops.append(
                self._applied(
                    Op(
                        "walk",
                        self._handle(),
                        {
                            "checkpoint_id": survivors[0].checkpoint_id,
                            "max_depth": DEFAULT_MAX_DEPTH,
                            "bodies": rng.random() < 0.5,
                        },
                    )
                )
            )
        if self.settings.has(Capability.INSPECT):
            ops.append(self._applied(Op("list_tombstones", self._handle(), {"workflow": workflow})))
        if self.settings.has(Capability.LIST_WORKFLOWS):
            ops.append(self._applied(Op("list_workflows", self._handle(), {})))
        ops.append(
            self._applied(
                Op(
                    "list_checkpoint_ids",
                    self._handle(),
                    {
                        "workflow": workflow,
                        "signature": None,
                        "include_nested": self.settings.has(Capability.NESTED),
                    },
                )
            )
        )
        return ops

    def _signature_probe(self) -> list[Op]:
        """A workflow continued under another signature, then read back per signature."""
        rng = self.rng
        workflow = rng.choice(self.workflows)
        first, second = rng.sample(self.signatures[workflow], 2)
        ops: list[Op] = []
        for signature in (first, second, second):
            draft = self._draft(workflow, self.model.latest_id(workflow))
            draft.graph_signature_hash = signature
            self.saved.append(draft)
            ops.append(self._applied(Op("save", self._handle(), {"draft": draft, "mutate_after": False})))
        for signature in (first, second):
            ops.append(
                self._applied(
                    Op(
                        "get_latest",
                        self._handle(),
                        {"workflow": workflow, "signature": signature, "mutate_after": False},
                    )
                )
            )
            ops.append(
                self._applied(
                    Op(
                        "list_checkpoint_ids",
                        self._handle(),
                        {"workflow": workflow, "signature": signature, "include_nested": False},
                    )
                )
            )
        return ops

    def _cross_handle_probe(self) -> list[Op]:
        """One handle reads a checkpoint, another removes or supersedes it, the first reads again:
        what a read cache, a memoised latest or a lagging replica answers wrongly."""
        rng = self.rng
        top = [r for r in self.model.records.values() if r.container is None]
        if not top:
            return [self.next_op()]
        record = rng.choice(top)
        reader, writer = rng.sample(range(self.settings.handles), 2)
        read = {"checkpoint_id": record.checkpoint_id, "signature": None, "mutate_after": False}
        listing = {"workflow": record.workflow, "signature": None, "include_nested": False}
        latest = {"workflow": record.workflow, "signature": None, "mutate_after": False}
        ops = [
            Op("load", reader, dict(read)),
            Op("get_latest", reader, dict(latest)),
            Op("list_checkpoint_ids", reader, dict(listing)),
        ]
        if rng.random() < 0.5:
            ops.append(Op("delete", writer, {"checkpoint_id": record.checkpoint_id}))
        else:
            ops.append(
                Op(
                    "save",
                    writer,
                    {"draft": self._draft(record.workflow, record.checkpoint_id), "mutate_after": False},
                )
            )
        ops += [
            Op("load", reader, dict(read)),
            Op("get_latest", reader, dict(latest)),
            Op("list_checkpoint_ids", reader, dict(listing)),
        ]
        for op in ops:
            if "draft" in op.params:
                self.saved.append(op["draft"])
            self._apply(op)
        return ops

    def _echo(self, op: Op, handle: int) -> Op:
        rng = self.rng
        draft = op.params.get("draft")
        if draft is not None:
            if rng.random() < 0.6 or not isinstance(draft.workflow_name, str):
                return Op(
                    "load",
                    handle,
                    {
                        "checkpoint_id": draft.checkpoint_id,
                        "signature": None,
                        "mutate_after": rng.random() < 0.3,
                    },
                )
            return Op(
                "get_latest",
                handle,
                {"workflow": draft.workflow_name, "signature": None, "mutate_after": False},
            )
        if op.kind == "delete":
            return Op(
                "load",
                handle,
                {"checkpoint_id": op["checkpoint_id"], "signature": None, "mutate_after": False},
            )
        written = [key for key in self.write_keys if key[0] == op.params.get("workflow")]
        if op.kind in ("prune", "delete_workflow") and written and rng.random() < 0.6:
            workflow, checkpoint_id = rng.choice(written)  # writes go with what was removed
            return Op("list_writes", handle, {"checkpoint_id": checkpoint_id, "workflow": workflow})
        if op.kind in ("put_writes", "delete_writes"):
            return Op(
                "list_writes", handle, {"checkpoint_id": op["checkpoint_id"], "workflow": op["workflow"]}
            )
        return Op(
            "list_checkpoint_ids",
            handle,
            {"workflow": op["workflow"], "signature": None, "include_nested": False},
        )

    # ---------------------------------------------------------------- concurrency

    def concurrent_round(self) -> Op:
        """Calls started together on different handles: racing chain saves, fenced saves on one
        head, one id with two contents, and reads and deletes in between."""
        rng = self.rng
        workflow = rng.choice(self.workflows)
        latest = self.model.latest_id(workflow)
        calls: list[Op] = []
        kind = rng.randrange(4)
        width = 2 + rng.randrange(3)
        fencing = self.settings.has(Capability.FENCING)
        for index in range(width):
            handle = index % max(self.settings.handles, 1)
            # Only the first call of a round embeds checkpoints: the contract orders records within
            # each workflow, and two families racing into one child workflow could be ordered there
            # either way by a store without cross-key transactions (S3).
            self.embeds = index == 0
            if kind == 0 or (kind == 1 and not fencing):
                calls.append(
                    Op("save", handle, {"draft": self._draft(workflow, latest), "mutate_after": False})
                )
            elif kind == 1:
                draft = self._draft(workflow, latest)
                calls.append(
                    Op(
                        "save_fenced",
                        handle,
                        {"draft": draft, "expected_latest_id": latest, "mutate_after": False},
                    )
                )
            elif kind == 2:
                if index == 0:
                    shared = self._draft(workflow, latest)
                    calls.append(Op("save", handle, {"draft": shared, "mutate_after": False}))
                else:
                    first = calls[0]["draft"]
                    calls.append(
                        Op(
                            "save",
                            handle,
                            {
                                "draft": with_changes(
                                    first, iteration_count=int(first.iteration_count) + index
                                ),
                                "mutate_after": False,
                            },
                        )
                    )
            else:
                read = rng.choice(("get_latest", "list_checkpoint_ids", "save", "delete"))
                if read == "save":
                    calls.append(
                        Op("save", handle, {"draft": self._draft(workflow, latest), "mutate_after": False})
                    )
                elif read == "delete":
                    calls.append(Op("delete", handle, {"checkpoint_id": latest or self._any_id()}))
                else:
                    calls.append(
                        Op(
                            read,
                            handle,
                            {
                                "workflow": workflow,
                                "signature": None,
                                "include_nested": False,
                                "mutate_after": False,
                            },
                        )
                    )
        for call in calls:
            if call.kind.startswith("save"):
                self.saved.append(call["draft"])
        self.embeds = True
        op = Op("concurrent", round=calls)
        # The generator's model takes the calls in the order listed: any order is as plausible.
        for call in calls:
            self._apply(call)
        return op

    def observer(self, round_op: Op) -> Op:
        """A listing of the workflow a round raced on: it tells the checker which order the
        storage chose, so the possible model states collapse to one again."""
        workflow = next(
            (c["draft"].workflow_name for c in round_op.round if "draft" in c.params),
            next((c["workflow"] for c in round_op.round if "workflow" in c.params), self.workflows[0]),
        )
        nested = self.settings.has(Capability.NESTED)
        return self._applied(
            Op("list_checkpoint_ids", 0, {"workflow": workflow, "signature": None, "include_nested": nested})
        )

    # ---------------------------------------------------------------- long histories

    def long_program(self, length: int) -> Iterator[Op]:
        """A chain of ``length`` saves with a bystander workflow whose name collides, a signature
        change midway, then every listing, a full walk, a prune and a delete of it all."""
        rng = self.rng
        s = self.settings
        workflow, bystander = self.workflows[0], self.workflows[1]
        signatures = self.signatures[workflow]
        previous: str | None = None
        for index in range(length):
            draft = Draft(
                workflow_name=workflow,
                graph_signature_hash=signatures[0] if index < length // 2 else signatures[1],
                checkpoint_id=self.names.new_id(rng),
                previous_checkpoint_id=previous,
                timestamp="2024-01-01T00:00:00+00:00",
                messages={},
                state={"i": index},
                pending_request_info_events={},
                iteration_count=index,
                metadata={},
            )
            previous = str(draft.checkpoint_id)
            yield self._applied(Op("save", 0, {"draft": draft, "mutate_after": False}))
            if index % 97 == 0:
                yield self._applied(
                    Op("save", 0, {"draft": self._draft(bystander, None), "mutate_after": False})
                )
            if index % 128 == 127:
                # Checked along the way too, so a run cut short by its time budget (a slow
                # store's default run) still compares the listing and latest it reached.
                listing = {"workflow": workflow, "signature": None, "include_nested": False}
                yield self._applied(Op("list_checkpoint_ids", 0, listing))
                yield self._applied(Op("get_latest", 0, {**listing, "mutate_after": False}))
        assert previous is not None
        yield self._applied(
            Op("list_checkpoint_ids", 0, {"workflow": workflow, "signature": None, "include_nested": False})
        )
        yield self._applied(
            Op("get_latest", 0, {"workflow": workflow, "signature": None, "mutate_after": False})
        )
        if s.has(Capability.SIGNATURE_FILTER):
            for signature in signatures[:2]:
                yield self._applied(
                    Op(
                        "list_checkpoint_ids",
                        0,
                        {"workflow": workflow, "signature": signature, "include_nested": False},
                    )
                )
                yield self._applied(
                    Op("get_latest", 0, {"workflow": workflow, "signature": signature, "mutate_after": False})
                )
        yield self._applied(
            Op(
                "list_checkpoints",
                0,
                {"workflow": workflow, "signature": None, "include_nested": False, "mutate_after": False},
            )
        )
        if s.has(Capability.ANCESTRY):
            yield self._applied(
                Op("walk", 0, {"checkpoint_id": previous, "max_depth": DEFAULT_MAX_DEPTH, "bodies": False})
            )
            yield self._applied(Op("walk", 0, {"checkpoint_id": previous, "max_depth": 5, "bodies": True}))
        if s.has(Capability.PRUNE):
            yield self._applied(Op("prune", 0, {"workflow": workflow, "keep_last": 7}))
            yield self._applied(
                Op(
                    "list_checkpoint_ids",
                    0,
                    {"workflow": workflow, "signature": None, "include_nested": False},
                )
            )
            yield self._applied(
                Op(
                    "list_checkpoint_ids",
                    0,
                    {"workflow": bystander, "signature": None, "include_nested": False},
                )
            )
            if s.has(Capability.ANCESTRY):
                yield self._applied(
                    Op(
                        "walk",
                        0,
                        {"checkpoint_id": previous, "max_depth": DEFAULT_MAX_DEPTH, "bodies": False},
                    )
                )
            if s.has(Capability.INSPECT):
                yield self._applied(Op("list_tombstones", 0, {"workflow": workflow}))
            yield self._applied(Op("delete_workflow", 0, {"workflow": workflow}))
            yield self._applied(
                Op(
                    "list_checkpoint_ids",
                    0,
                    {"workflow": workflow, "signature": None, "include_nested": False},
                )
            )
        else:
            yield self._applied(Op("delete", 0, {"checkpoint_id": previous}))
            yield self._applied(
                Op("get_latest", 0, {"workflow": workflow, "signature": None, "mutate_after": False})
            )
        if s.has(Capability.LIST_WORKFLOWS):
            yield self._applied(Op("list_workflows", 0, {}))

    def _applied(self, op: Op) -> Op:
        self._apply(op)
        return op


def retag(ops: list[Op], old: str, new: str) -> list[Op]:
    """The same program under fresh names: every string holding ``old`` gets ``new`` instead
    (embedded aliases stay aliases), so a replay never meets what an earlier run stored."""
    memo: dict[int, Any] = {}

    def text(value: Any) -> Any:
        return value.replace(old, new) if isinstance(value, str) else value

    def draft(value: Draft) -> Draft:
        if id(value) not in memo:
            memo[id(value)] = Draft(
                **{name: deep(getattr(value, name)) for name in value.__dataclass_fields__}
            )
        return memo[id(value)]  # type: ignore[no-any-return]

    def rebuild(value: Any) -> Any:
        from .values import KEEP

        if isinstance(value, Embedded):
            if id(value) not in memo:
                memo[id(value)] = Embedded(draft(value.draft))
            return memo[id(value)]
        if isinstance(value, Draft):
            return draft(value)
        if isinstance(value, Write):
            return Write(
                text(value.task_id), value.index, text(value.channel), deep(value.value), value.task_path
            )
        if isinstance(value, str):
            return text(value)
        if isinstance(value, dict):
            return {text(key): deep(item) for key, item in value.items()}
        return KEEP

    def deep(value: Any) -> Any:
        return copy_value(value, rebuild)

    def one(op: Op) -> Op:
        return Op(
            op.kind,
            op.handle,
            {key: deep(value) for key, value in op.params.items()},
            [one(o) for o in op.round],
        )

    return [one(op) for op in ops]


__all__ = ["DEFAULT_MAX_DEPTH", "Generator", "Namer", "Op", "Settings", "retag"]
