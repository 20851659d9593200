"""One generated call at a time: the draws a program is made of (ids that collide, values of the
codec's whole domain, drafts with nested records, saves, reads, deletes, pending writes), each
applied to the generator's own model as it is drawn, so the program never depends on what a
storage answers.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from storages.contract import Capability

from .domain import (
    CHILD_SUFFIXES,
    DEFAULT_MAX_DEPTH,
    LARGE_VALUES,
    SIGNATURES,
    WORKFLOW_SUFFIXES,
    Namer,
    Settings,
)
from .execute import apply
from .ops import Op
from .spec import ContractModel, Draft, Embedded, Write, with_changes
from .values import draw_mapping, draw_value


class ProgramDraws:
    """A generator's state (its model, names, what it saved) and the draw of one call."""

    def __init__(self, settings: Settings, seed: int, tag: str) -> None:
        self.settings = settings
        self.rng = random.Random(seed)  # noqa: S311 - reproducible draws, not secrets
        self.names = Namer(tag)
        self.model = ContractModel(nested=settings.has(Capability.NESTED))
        rng = self.rng
        workflows = ["flow", *rng.sample(WORKFLOW_SUFFIXES[1:], 3)]
        self.workflows = [self.names.workflow(s) for s in workflows]
        self.children = [self.names.workflow(s) for s in CHILD_SUFFIXES]
        self.signatures = {
            name: ["sig-a", *rng.sample(SIGNATURES[1:], 2)] for name in self.workflows + self.children
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
            fields["state"]["large"] = rng.choice(LARGE_VALUES)
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
        return self.rng.choice(SIGNATURES)

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

    def _applied(self, op: Op) -> Op:
        self._apply(op)
        return op
