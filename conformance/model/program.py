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

from collections.abc import Iterator
from typing import Any

from storages.contract import Capability

from .domain import DEFAULT_MAX_DEPTH, WRITE_KINDS, Namer, Settings
from .ops import Op
from .probes import ProgramProbes
from .spec import Draft, Embedded, Write, with_changes
from .values import copy_value


class Generator(ProgramProbes):
    """Draws programs for one storage from one seed: sequential programs of single calls and
    probes, concurrent rounds, and long programs for the scale of a history."""

    def program(self, count: int) -> list[Op]:
        """``count`` ops; most writes are followed by a read of what they wrote, on another handle
        where there are several (what a per-handle cache or a lagging replica gets wrong)."""
        ops: list[Op] = []
        echo = 0.6 if self.settings.handles > 1 else 0.35
        probes = self._probes()
        # Probes take turns (in an order the seed shuffles), so a short program still runs each
        # kind a fair share of times rather than whatever the draws happen to favour.
        self.rng.shuffle(probes)
        turn = 0
        while len(ops) < count:
            if probes and self.rng.random() < 0.12:
                ops += probes[turn % len(probes)]()  # each probe applies its ops as it draws them
                turn += 1
                continue
            op = self.next_op()
            ops.append(op)
            if op.kind in WRITE_KINDS and self.rng.random() < echo:
                handles = self.settings.handles
                others = [h for h in range(handles) if h != op.handle] or [0]
                if op.kind in ("save", "save_fenced"):
                    others = [self.rng.choice(others)]
                # A removal is read back on every other handle: any of them may hold a stale copy.
                ops += [self._applied(self._echo(op, handle)) for handle in others]
        return ops

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
