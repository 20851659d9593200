"""Short scenarios a program draws among its single calls, each aimed at where features meet:
re-saves, values past 64 KiB, nested records, pending writes, retention, signatures, and a call
read back on another handle.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from storages.contract import Capability

from .domain import DEFAULT_MAX_DEPTH, LARGE_VALUES
from .draws import ProgramDraws
from .ops import Op
from .spec import Write
from .values import draw_value


class ProgramProbes(ProgramDraws):
    """The probes, over the single-call draws they are built from."""

    def _probes(self) -> list[Any]:
        """Short scenarios aimed at where features meet, drawn among the generated calls."""
        s = self.settings
        probes: list[Any] = [
            self._resave_probe,
            self._large_value_probe,
            self._lineage_probe,
            self._near_id_probe,
        ]
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
        getattr(draft, field)["large"] = rng.choice(LARGE_VALUES)
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

    def _lineage_probe(self) -> list[Op]:
        """A short chain continuing the latest, saved out of order (reversed or shuffled, as
        concurrent step saves commit on a slow store), mostly under one signature, sometimes
        forked: latest resolves each commit through the lineage, after every save."""
        rng = self.rng
        workflow = rng.choice(self.workflows)
        previous = self.model.latest_id(workflow)
        signature = self._signature(workflow)
        drafts = []
        for _ in range(rng.randint(2, 4)):
            draft = self._draft(workflow, previous, embeds=False)
            if rng.random() < 0.8:
                draft = replace(draft, graph_signature_hash=signature)
            drafts.append(draft)
            if rng.random() < 0.8:  # else the next one forks from the same checkpoint
                previous = draft.checkpoint_id
        order = drafts[::-1]
        if rng.random() < 0.5:
            rng.shuffle(order)
        latest = {"workflow": workflow, "signature": None, "mutate_after": False}
        ops: list[Op] = []
        for draft in order:
            self.saved.append(draft)
            ops.append(self._applied(Op("save", self._handle(), {"draft": draft, "mutate_after": False})))
            ops.append(self._applied(Op("get_latest", self._handle(), dict(latest))))
        if self.settings.has(Capability.SIGNATURE_FILTER):
            ops.append(self._applied(Op("get_latest", self._handle(), {**latest, "signature": signature})))
        listing = {"workflow": workflow, "signature": None, "include_nested": False}
        ops.append(self._applied(Op("list_checkpoint_ids", self._handle(), listing)))
        return ops

    def _near_id_probe(self) -> list[Op]:
        """A new checkpoint under an id that differs from a stored one only as a broken key scheme
        might confuse (Unicode normalisation, case, a trailing space, an escaped slash, a shared
        prefix), continuing it; then both read back by id, as latest and in a walk."""
        rng = self.rng
        top = self._top()
        if not top:
            return [self.next_op()]
        collides = [
            r for r in top if any(mark in r.checkpoint_id for mark in ("é", "e\u0301", " ", "/", "%2F"))
        ]
        original = rng.choice(collides if collides and rng.random() < 0.7 else top)
        twin_id = self.names.twin_of(original.checkpoint_id, rng)
        if twin_id in self.model.records:
            return [self.next_op()]
        draft = self._draft(original.workflow, original.checkpoint_id, checkpoint_id=twin_id, embeds=False)
        self.saved.append(draft)
        ops = [self._applied(Op("save", self._handle(), {"draft": draft, "mutate_after": False}))]
        for checkpoint_id in (original.checkpoint_id, twin_id):
            read = {"checkpoint_id": checkpoint_id, "signature": None, "mutate_after": False}
            ops.append(self._applied(Op("load", self._handle(), read)))
        latest = {"workflow": original.workflow, "signature": None, "mutate_after": False}
        ops.append(self._applied(Op("get_latest", self._handle(), latest)))
        if self.settings.has(Capability.ANCESTRY):
            walk = {"checkpoint_id": twin_id, "max_depth": DEFAULT_MAX_DEPTH, "bodies": rng.random() < 0.5}
            ops.append(self._applied(Op("walk", self._handle(), walk)))
        return ops

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
        # The same checkpoint id under a bystander workflow has writes of its own (none yet).
        bystander = rng.choice([w for w in self.workflows if w != record.workflow])
        ops.append(
            self._applied(
                Op(
                    "list_writes",
                    self._handle(),
                    {"checkpoint_id": record.checkpoint_id, "workflow": bystander},
                )
            )
        )
        removals = ["delete", "delete_writes", "none"]
        if self.settings.has(Capability.PRUNE):  # a storage without it refuses both
            removals[:0] = ["prune", "delete_workflow"]
        removal = rng.choice(removals)
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
        if self.settings.load_signature:
            # The last one loaded expecting its own graph, then another's (refused).
            for expected in (second, first):
                read = {"checkpoint_id": draft.checkpoint_id, "signature": expected, "mutate_after": False}
                ops.append(self._applied(Op("load", self._handle(), read)))
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
