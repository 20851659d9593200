"""signature: graph signatures are kept byte for byte, filter latest and listing, and are enforced on load.

MAF's runner refuses to restore a checkpoint whose ``graph_signature_hash`` differs from the
current graph's. A storage that rewrites the hash (trims it, folds its case, normalises its
unicode) makes a valid checkpoint unrestorable, or worse, restorable into a different graph. The
filters must compare the hash exactly and order by commit, never by timestamp, and
``load(..., expected_graph_signature_hash=)`` must refuse a mismatch before anything is restored.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from storages.contract import Capability
from storages.errors import GraphSignatureMismatchError, InvalidCheckpointError

from ..clause import clause, ensure, ensure_equal, fail, not_applicable
from ..context import ClauseContext, unstored_parent
from .fidelity import read_back
from .nested import (
    FIXED_TIMESTAMP,
    embedded,
    expect_loads,
    expect_not_found,
    expect_same,
    ids,
    listed_ids,
    sub_workflow_state,
)

_CAFE = "café-graph"

ODD_SIGNATURES: tuple[str, ...] = (
    "SHA256:Ünïcödé/日本語/🙂\u00a0sig",
    "0123456789abcdef" * 4,
    "0123456789ABCDEF" * 4,
    " ",
    "",
    "sig-with-trailing-space ",
    "sig-with-trailing-space",
    " sig-with-leading-space",
    "tab\tinside",
    unicodedata.normalize("NFC", _CAFE),
    unicodedata.normalize("NFD", _CAFE),
)
"""Hashes a backend may mangle: unicode, long hex in both cases, whitespace-only, the empty string
(a filter a truthiness test drops), trailing and leading whitespace, and the same text in two
unicode normal forms. Pairs differ only in case, whitespace or normal form: a storage must keep
them apart."""

_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


def _falling_timestamp(position: int) -> str:
    """Timestamps that fall as commits rise: the checkpoint saved last looks oldest."""
    return (_EPOCH + timedelta(hours=100 - position)).isoformat()


def _show_ids(checkpoint: Any) -> str:
    return "None" if checkpoint is None else repr(checkpoint.checkpoint_id)


def _odd_checkpoints(ctx: ClauseContext, workflow_name: str) -> list[Any]:
    return [
        ctx.checkpoint(
            workflow_name,
            checkpoint_id=f"{workflow_name}-odd-{index}",
            graph_signature_hash=signature,
            timestamp=_falling_timestamp(index),
            iteration_count=index,
        )
        for index, signature in enumerate(ODD_SIGNATURES)
    ]


# ---------------------------------------------------------------------- clauses


@clause(
    "signature.preserved_exactly",
    "graph_signature_hash comes back byte for byte (unicode, 64-hex in either case, ' ', '', trailing "
    "spaces), at the top and at every level of embedded checkpoints.",
)
async def preserved_exactly(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("odd-signatures")
    for checkpoint in _odd_checkpoints(ctx, workflow_name):
        await ctx.storage.save(checkpoint)
        for source, copy in await read_back(ctx, checkpoint):
            ensure_equal(
                copy.graph_signature_hash,
                checkpoint.graph_signature_hash,
                f"graph_signature_hash of {source}",
            )
        if ctx.has(Capability.INSPECT):
            info = await ctx.storage.checkpoint_info(checkpoint.checkpoint_id)
            ensure(info is not None, f"checkpoint_info({checkpoint.checkpoint_id!r}) returned None")
            ensure_equal(
                info.graph_signature_hash,
                checkpoint.graph_signature_hash,
                f"checkpoint_info({checkpoint.checkpoint_id!r}).graph_signature_hash",
            )
    # Every level below the top carries a different odd signature (embedded inline or as records).
    levels: list[Any] = []
    inner: Any = None
    for depth, signature in enumerate(ODD_SIGNATURES[:4]):
        state = {} if inner is None else sub_workflow_state(inner)
        inner = embedded(ctx, f"odd-level-{depth}", graph_signature_hash=signature, state=state)
        levels.append(inner)
    top = levels[-1]
    await ctx.storage.save(top)
    loaded = await ctx.storage.load(top.checkpoint_id)
    for depth in range(len(levels) - 1, -1, -1):
        expected = levels[depth]
        ensure_equal(
            loaded.graph_signature_hash,
            expected.graph_signature_hash,
            f"graph_signature_hash of {expected.checkpoint_id!r}, embedded {len(levels) - 1 - depth} "
            f"levels below {top.checkpoint_id!r}",
        )
        if depth:
            loaded = loaded.state["_executor_state"]["sub"]["sub_workflow_checkpoint"]


NUL_SIGNATURE = "sig\x00nul"
"""A signature holding NUL, which PostgreSQL's text cannot hold: a storage keeps it or refuses it."""


_REFUSED = object()
"""What _kept_or_refused answers for a call refused as the contract allows."""


async def _kept_or_refused(call: str, attempt: Callable[[], Awaitable[Any]]) -> Any:
    """``attempt``'s answer, or _REFUSED if it refused as the contract allows
    (InvalidCheckpointError naming graph_signature_hash); any other error fails the clause."""
    try:
        return await attempt()
    except InvalidCheckpointError as exc:
        ensure_equal(exc.field, "graph_signature_hash", f"the field {call} named refusing a NUL signature")
        return _REFUSED
    except Exception as exc:
        fail(
            f"{call} raised {type(exc).__name__}: {exc}; a signature holding NUL is kept byte for byte "
            "or refused with InvalidCheckpointError naming graph_signature_hash"
        )


@clause(
    "signature.nul_kept_or_refused",
    "A graph signature holding NUL, at the top or embedded, is kept byte for byte (load, get_latest, "
    "listings, filters) or refused with InvalidCheckpointError naming graph_signature_hash, nothing "
    "stored; never changed, never another error.",
)
async def nul_kept_or_refused(ctx: ClauseContext) -> None:
    storage = ctx.storage
    workflow_name = ctx.workflow_name("nul-signature")
    top = ctx.checkpoint(
        workflow_name, checkpoint_id=f"{workflow_name}-top", graph_signature_hash=NUL_SIGNATURE
    )
    top_kept = (
        await _kept_or_refused(f"save({top.checkpoint_id!r})", partial(storage.save, top)) is not _REFUSED
    )
    if top_kept:
        for source, copy in await read_back(ctx, top):
            ensure_equal(copy.graph_signature_hash, NUL_SIGNATURE, f"graph_signature_hash of {source}")
    else:
        await expect_not_found(ctx, top.checkpoint_id, "after its save was refused")
        ensure_equal(
            await listed_ids(ctx, workflow_name),
            [],
            f"list_checkpoint_ids({workflow_name!r}) after a refused save",
        )
    if ctx.has(Capability.SIGNATURE_FILTER):
        kept = top.checkpoint_id if top_kept else None
        # The signature itself finds it; one differing only after the NUL, or cut at it, does not.
        for signature, expected in ((NUL_SIGNATURE, kept), ("sig\x00nux", None), ("sig", None)):
            call = f"list_checkpoint_ids({workflow_name!r}, graph_signature_hash={signature!r})"
            found = await _kept_or_refused(
                call,
                partial(
                    storage.list_checkpoint_ids, workflow_name=workflow_name, graph_signature_hash=signature
                ),
            )
            if found is not _REFUSED:
                ensure_equal(list(found), [] if expected is None else [expected], call)
            call = f"get_latest({workflow_name!r}, graph_signature_hash={signature!r})"
            latest = await _kept_or_refused(
                call, partial(storage.get_latest, workflow_name=workflow_name, graph_signature_hash=signature)
            )
            if latest is not _REFUSED:
                ensure_equal(getattr(latest, "checkpoint_id", None), expected, f"id of {call}")
    if not ctx.has(Capability.NESTED):
        return
    child = embedded(ctx, "nul-signature-child", graph_signature_hash=NUL_SIGNATURE)
    parent = embedded(ctx, "nul-signature-parent", state=sub_workflow_state(child))
    saved = await _kept_or_refused(
        f"save({parent.checkpoint_id!r}) embedding it", partial(storage.save, parent)
    )
    if saved is not _REFUSED:
        await expect_loads(ctx, child, f"embedded in {parent.checkpoint_id!r}")
        await expect_loads(ctx, parent, "holding a checkpoint whose signature holds NUL")
    else:
        await expect_not_found(ctx, parent.checkpoint_id, "after its save was refused")
        await expect_not_found(
            ctx, child.checkpoint_id, f"(embedded in {parent.checkpoint_id!r}) after the refused save"
        )


@clause(
    "signature.latest_by_signature",
    "get_latest(graph_signature_hash=h) returns the checkpoint of that signature saved last (commit "
    "order, not timestamp); an unknown h gives None.",
    requires=[Capability.SIGNATURE_FILTER],
)
async def latest_by_signature(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("latest-by-signature")
    signatures = (
        "sig-latest-a",
        "sig-latest-b",
        "sig-latest-a",
        "sig-latest-a",
        "sig-latest-b",
        "sig-latest-c",
    )
    saved: list[Any] = []
    for position, signature in enumerate(signatures):
        checkpoint = ctx.checkpoint(
            workflow_name,
            checkpoint_id=f"{workflow_name}-{position}",
            previous_checkpoint_id=unstored_parent(f"{workflow_name}-{position}"),
            graph_signature_hash=signature,
            timestamp=_falling_timestamp(position),
            iteration_count=position,
        )
        await ctx.storage.save(checkpoint)
        saved.append(checkpoint)
        # After each save, every signature seen so far must resolve to its last commit.
        for wanted in sorted(set(signatures[: position + 1])):
            expected = [c for c in saved if c.graph_signature_hash == wanted][-1]
            latest = await ctx.storage.get_latest(workflow_name=workflow_name, graph_signature_hash=wanted)
            ensure(
                latest is not None and latest.checkpoint_id == expected.checkpoint_id,
                f"get_latest(graph_signature_hash={wanted!r}) after saving {checkpoint.checkpoint_id!r} "
                f"returned {_show_ids(latest)}, expected {expected.checkpoint_id!r} (saved last with that "
                "signature; timestamps fall as commits rise)",
            )
            if latest is not None:
                expect_same(expected, latest, f"get_latest(graph_signature_hash={wanted!r})")
    for unknown in ("sig-latest-unknown", "sig-latest-A", "sig-latest-a "):
        latest = await ctx.storage.get_latest(workflow_name=workflow_name, graph_signature_hash=unknown)
        ensure(
            latest is None,
            f"get_latest(graph_signature_hash={unknown!r}), a signature no checkpoint has, returned "
            f"{_show_ids(latest)}, not None",
        )


@clause(
    "signature.latest_root_rivals_across_signatures",
    "get_latest(graph_signature_hash=h) ranks roots as the unfiltered order does: a checkpoint of another "
    "signature committed between roots of h ends their rivalry; roots of h committed one after another "
    "still rival by timestamp.",
    requires=[Capability.SIGNATURE_FILTER],
)
async def latest_root_rivals_across_signatures(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("root-rivals-by-signature")
    # Commit order r0..r4; timestamps rise with the hour given. r0, the newest clock of the first
    # three, must not rival r2 across r1; r3 and r2 rival r4, and r3 has the newest clock of those.
    plan = (
        ("sig-root-a", 90),
        ("sig-root-b", 10),
        ("sig-root-a", 20),
        ("sig-root-a", 80),
        ("sig-root-a", 30),
    )
    saved: list[Any] = []
    for position, (signature, hour) in enumerate(plan):
        checkpoint = ctx.checkpoint(
            workflow_name,
            checkpoint_id=f"{workflow_name}-r{position}",
            graph_signature_hash=signature,
            timestamp=(_EPOCH + timedelta(hours=hour)).isoformat(),
            iteration_count=position,
        )
        await ctx.storage.save(checkpoint)
        saved.append(checkpoint)
        if position == 2:
            await _expect_latest_of(
                ctx, workflow_name, "sig-root-a", saved[2], "after roots r0 (a), r1 (b), r2 (a)"
            )
            await _expect_latest_of(ctx, workflow_name, None, saved[2], "after roots r0 (a), r1 (b), r2 (a)")
    when = "after roots r0 (a), r1 (b), r2, r3, r4 (a)"
    await _expect_latest_of(ctx, workflow_name, "sig-root-a", saved[3], when)
    await _expect_latest_of(ctx, workflow_name, "sig-root-b", saved[1], when)


async def _expect_latest_of(
    ctx: ClauseContext, workflow_name: str, signature: str | None, expected: Any, when: str
) -> None:
    latest = await ctx.storage.get_latest(workflow_name=workflow_name, graph_signature_hash=signature)
    ensure(
        latest is not None and latest.checkpoint_id == expected.checkpoint_id,
        f"get_latest(graph_signature_hash={signature!r}) {when} returned {_show_ids(latest)}, expected "
        f"{expected.checkpoint_id!r} (roots rival only when nothing else is committed between them; "
        "among rivals the newest timestamp wins)",
    )


@clause(
    "signature.list_by_signature",
    "list_checkpoints/list_checkpoint_ids(graph_signature_hash=h) return exactly h's checkpoints in "
    "commit order; an unknown h gives [].",
    requires=[Capability.SIGNATURE_FILTER],
)
async def list_by_signature(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("list-by-signature")
    signatures = ("sig-list-a", "sig-list-b", "sig-list-a", "sig-list-b", "sig-list-a")
    saved = []
    for position, signature in enumerate(signatures):
        checkpoint = ctx.checkpoint(
            workflow_name,
            # Ids sort against commit order too.
            checkpoint_id=f"{workflow_name}-{9 - position}",
            graph_signature_hash=signature,
            timestamp=_falling_timestamp(position),
        )
        await ctx.storage.save(checkpoint)
        saved.append(checkpoint)
    for wanted in ("sig-list-a", "sig-list-b"):
        expected = [c for c in saved if c.graph_signature_hash == wanted]
        listed_ids = await ctx.storage.list_checkpoint_ids(
            workflow_name=workflow_name, graph_signature_hash=wanted
        )
        ensure_equal(listed_ids, ids(expected), f"list_checkpoint_ids(graph_signature_hash={wanted!r})")
        listed = await ctx.storage.list_checkpoints(workflow_name=workflow_name, graph_signature_hash=wanted)
        ensure_equal(ids(listed), ids(expected), f"list_checkpoints(graph_signature_hash={wanted!r}) ids")
        for want, got in zip(expected, listed, strict=True):
            expect_same(want, got, f"list_checkpoints(graph_signature_hash={wanted!r})")
    for unknown in ("sig-list-unknown", "SIG-LIST-A", "sig-list-a "):
        ensure_equal(
            await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name, graph_signature_hash=unknown),
            [],
            f"list_checkpoint_ids(graph_signature_hash={unknown!r}), a signature no checkpoint has",
        )
        ensure_equal(
            await ctx.storage.list_checkpoints(workflow_name=workflow_name, graph_signature_hash=unknown),
            [],
            f"list_checkpoints(graph_signature_hash={unknown!r}), a signature no checkpoint has",
        )


@clause(
    "signature.filter_is_exact",
    "Signatures differing only in case, surrounding whitespace or unicode normal form, and the empty "
    "signature, filter apart: each selects only its own checkpoint in both listings and get_latest; so do "
    "two workflows whose name and signature join into one string (w/x with y, w with x/y).",
    requires=[Capability.SIGNATURE_FILTER],
)
async def filter_is_exact(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("exact-filter")
    saved = _odd_checkpoints(ctx, workflow_name)
    for checkpoint in saved:
        await ctx.storage.save(checkpoint)
    for checkpoint in saved:
        signature = checkpoint.graph_signature_hash
        listed = await ctx.storage.list_checkpoint_ids(
            workflow_name=workflow_name, graph_signature_hash=signature
        )
        ensure_equal(
            listed, [checkpoint.checkpoint_id], f"list_checkpoint_ids(graph_signature_hash={signature!r})"
        )
        # The bodies' listing filters on its own (a backend may filter one listing and not the
        # other): a filter dropped there hands back, or trips over, the other signatures' bodies.
        bodies = await ctx.storage.list_checkpoints(
            workflow_name=workflow_name, graph_signature_hash=signature
        )
        ensure_equal(
            ids(bodies),
            [checkpoint.checkpoint_id],
            f"list_checkpoints(graph_signature_hash={signature!r}) ids",
        )
        latest = await ctx.storage.get_latest(workflow_name=workflow_name, graph_signature_hash=signature)
        ensure(
            latest is not None and latest.checkpoint_id == checkpoint.checkpoint_id,
            f"get_latest(graph_signature_hash={signature!r}) returned {_show_ids(latest)}, expected "
            f"{checkpoint.checkpoint_id!r}, the only checkpoint with exactly that signature",
        )
    await _name_and_signature_kept_apart(ctx)


JOINERS: tuple[str, ...] = ("/", ":", "|", "#", " ", "-", "")
"""What a store may put between a workflow name and a signature to key a filter by one string."""


async def _name_and_signature_kept_apart(ctx: ClauseContext) -> None:
    """A workflow ``w + j + "x"`` of signature ``"y"`` and the workflow ``w`` of signature
    ``"x" + j + "y"`` join into one string by ``j``: a filter keyed so hands each the other's."""
    base = ctx.workflow_name("joined-filter")
    pairs = []
    for joiner in JOINERS:
        longer = ctx.checkpoint(f"{base}{joiner}x", graph_signature_hash="y")
        shorter = ctx.checkpoint(base, graph_signature_hash=f"x{joiner}y")
        for checkpoint in (longer, shorter):
            await ctx.storage.save(checkpoint)
        pairs += [longer, shorter]
    for checkpoint in pairs:
        name, signature = checkpoint.workflow_name, checkpoint.graph_signature_hash
        where = f"of workflow {name!r} (graph_signature_hash={signature!r})"
        listed = await ctx.storage.list_checkpoint_ids(workflow_name=name, graph_signature_hash=signature)
        ensure_equal(listed, [checkpoint.checkpoint_id], f"list_checkpoint_ids() {where}")
        bodies = await ctx.storage.list_checkpoints(workflow_name=name, graph_signature_hash=signature)
        ensure_equal(ids(bodies), [checkpoint.checkpoint_id], f"list_checkpoints() {where} ids")
        latest = await ctx.storage.get_latest(workflow_name=name, graph_signature_hash=signature)
        ensure(
            latest is not None and latest.checkpoint_id == checkpoint.checkpoint_id,
            f"get_latest() {where} returned {_show_ids(latest)}, expected {checkpoint.checkpoint_id!r}",
        )


@clause(
    "signature.load_rejects_mismatch",
    "load(id, expected_graph_signature_hash=h) of a checkpoint with another signature raises "
    "GraphSignatureMismatchError naming both hashes and changes nothing stored.",
)
async def load_rejects_mismatch(ctx: ClauseContext) -> None:
    _require_load_keyword(ctx)
    workflow_name = ctx.workflow_name("mismatch")
    stored = "sig-mismatch-Stored"
    checkpoint = ctx.checkpoint(
        workflow_name,
        checkpoint_id=f"{workflow_name}-only",
        graph_signature_hash=stored,
        timestamp=FIXED_TIMESTAMP,
        state={"counter": 1},
    )
    targets = [(checkpoint, ["sig-mismatch-other", stored.lower(), stored + " ", ""])]
    if ctx.has(Capability.NESTED):
        child = embedded(ctx, "mismatch-child", graph_signature_hash="sig-mismatch-child")
        parent = embedded(ctx, "mismatch-parent", state=sub_workflow_state(child))
        await ctx.storage.save(parent)
        # An embedded checkpoint is checked against its own signature, not its container's.
        targets.append((child, [parent.graph_signature_hash]))
    await ctx.storage.save(checkpoint)
    for target, wrong_hashes in targets:
        for wrong in wrong_hashes:
            await _expect_mismatch(ctx, target, wrong)
        await expect_loads(ctx, target, "after the refused loads")
    latest = await ctx.storage.get_latest(workflow_name=workflow_name)
    ensure(
        latest is not None and latest.checkpoint_id == checkpoint.checkpoint_id,
        f"get_latest({workflow_name!r}) after the refused loads returned {_show_ids(latest)}",
    )
    ensure_equal(
        await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name),
        [checkpoint.checkpoint_id],
        f"list_checkpoint_ids({workflow_name!r}) after the refused loads",
    )


async def _expect_mismatch(ctx: ClauseContext, checkpoint: Any, wrong: str) -> None:
    checkpoint_id = checkpoint.checkpoint_id
    actual = checkpoint.graph_signature_hash
    call = f"load({checkpoint_id!r}, expected_graph_signature_hash={wrong!r})"
    try:
        loaded = await ctx.storage.load(checkpoint_id, expected_graph_signature_hash=wrong)
    except GraphSignatureMismatchError as exc:
        ensure_equal(
            (getattr(exc, "expected", None), getattr(exc, "actual", None)),
            (wrong, actual),
            f"(expected, actual) of the GraphSignatureMismatchError from {call}",
        )
        text = str(exc)
        ensure(
            repr(wrong) in text or wrong in text,
            f"the GraphSignatureMismatchError from {call} does not name the expected hash: {text}",
        )
        ensure(
            actual in text,
            f"the GraphSignatureMismatchError from {call} does not name the stored hash {actual!r}: {text}",
        )
        return
    except Exception as exc:
        fail(f"{call} of a checkpoint with signature {actual!r} raised {type(exc).__name__}: {exc}")
    fail(
        f"{call} of a checkpoint with signature {actual!r} returned a checkpoint with signature "
        f"{loaded.graph_signature_hash!r}; it must raise GraphSignatureMismatchError"
    )


@clause(
    "signature.load_accepts_match",
    "load(id, expected_graph_signature_hash=h) with the stored signature, odd ones included, returns "
    "the checkpoint as a plain load does.",
)
async def load_accepts_match(ctx: ClauseContext) -> None:
    _require_load_keyword(ctx)
    workflow_name = ctx.workflow_name("match")
    for checkpoint in _odd_checkpoints(ctx, workflow_name):
        await ctx.storage.save(checkpoint)
        checkpoint_id = checkpoint.checkpoint_id
        expected = checkpoint.graph_signature_hash
        call = f"load({checkpoint_id!r}, expected_graph_signature_hash={expected!r})"
        try:
            loaded = await ctx.storage.load(checkpoint_id, expected_graph_signature_hash=expected)
        except Exception as exc:
            fail(f"{call} of a checkpoint with exactly that signature raised {type(exc).__name__}: {exc}")
        expect_same(checkpoint, loaded, call)


@clause(
    "signature.nested_keep_own",
    "Embedded checkpoints keep their own signature (not their container's) and filter by it with "
    "include_nested=True; they are never a filtered get_latest().",
    requires=[Capability.NESTED, Capability.SIGNATURE_FILTER],
)
async def nested_keep_own(ctx: ClauseContext) -> None:
    storage = ctx.storage
    child = embedded(ctx, "own-sig-child", graph_signature_hash="sig-own-child")
    workflow_name = child.workflow_name
    middle = embedded(
        ctx, "own-sig-middle", graph_signature_hash="sig-own-middle", state=sub_workflow_state(child)
    )
    parent = embedded(
        ctx, "own-sig-parent", graph_signature_hash="sig-own-parent", state=sub_workflow_state(middle)
    )
    sibling = ctx.checkpoint(
        workflow_name,
        checkpoint_id=f"{workflow_name}-sibling",
        graph_signature_hash="sig-own-parent",
        timestamp=FIXED_TIMESTAMP,
    )
    await storage.save(parent)
    await storage.save(sibling)
    for checkpoint in (middle, child):
        loaded = await storage.load(checkpoint.checkpoint_id)
        ensure_equal(
            loaded.graph_signature_hash,
            checkpoint.graph_signature_hash,
            f"graph_signature_hash of load({checkpoint.checkpoint_id!r}), "
            f"embedded in {parent.checkpoint_id!r}",
        )
    expectations = [("sig-own-child", [child]), ("sig-own-parent", [sibling]), ("sig-own-middle", [])]
    for signature, expected in expectations:
        call = f"({workflow_name!r}, graph_signature_hash={signature!r}, include_nested=True)"
        found = await storage.list_checkpoint_ids(
            workflow_name=workflow_name, graph_signature_hash=signature, include_nested=True
        )
        ensure_equal(
            found,
            ids(expected),
            f"list_checkpoint_ids{call}",
        )
        listed = await storage.list_checkpoints(
            workflow_name=workflow_name, graph_signature_hash=signature, include_nested=True
        )
        ensure_equal(
            ids(listed),
            ids(expected),
            f"list_checkpoints{call} ids",
        )
    hidden = await storage.list_checkpoint_ids(
        workflow_name=workflow_name, graph_signature_hash="sig-own-child"
    )
    ensure_equal(
        hidden,
        [],
        f"list_checkpoint_ids({workflow_name!r}, graph_signature_hash='sig-own-child') "
        "without include_nested",
    )
    latest = await storage.get_latest(workflow_name=workflow_name, graph_signature_hash="sig-own-child")
    ensure(
        latest is None,
        f"get_latest({workflow_name!r}, graph_signature_hash='sig-own-child') returned {_show_ids(latest)}; "
        f"only embedded {child.checkpoint_id!r} has that signature and embedded checkpoints are never latest",
    )


def _require_load_keyword(ctx: ClauseContext) -> None:
    if not ctx.accepts_keyword("load", "expected_graph_signature_hash"):
        not_applicable(
            "load() takes no expected_graph_signature_hash (MAF's six-method protocol has none): "
            "the storage cannot be asked to enforce a signature on load"
        )
