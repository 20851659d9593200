"""identifiers: hostile ids and names are stored safely or refused with a typed error.

Backends turn ids and workflow names into file paths, object keys, Redis keys and SQL values,
where ``/``, ``..``, ``*``, ``{...}``, quotes and ``%`` escapes mean something, and where case,
Unicode normalisation or byte length may be folded. Valid ids must come back exactly as given
and never collide; invalid ones must be refused before anything is stored.

Every hostile string embeds a tag unique to the run, so clauses never meet an earlier run's data
and never need to wipe a store. Checkpoints saved here are deleted again where the clause can.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from storages.contract import MAX_ID_LENGTH
from storages.errors import InvalidCheckpointIdError

from ..clause import clause, ensure, ensure_equal, fail
from ..context import ClauseContext
from ._maf import is_not_found

Builder = Callable[[str], str]

# What each hostile but valid string is, and how to build it around a unique tag ``t``.
_HOSTILE: tuple[tuple[str, Builder], ...] = (
    ("relative path traversal", lambda t: f"../../{t}/etc/passwd"),
    ("traversal after a segment", lambda t: f"{t}/../../etc/passwd"),
    ("backslash traversal", lambda t: f"..\\..\\{t}\\system32"),
    ("leading slash", lambda t: f"/{t}"),
    ("trailing slash", lambda t: f"{t}/"),
    ("empty path segment", lambda t: f"{t}//x"),
    ("dot segments", lambda t: f"{t}/./."),
    ("trailing dot-dot", lambda t: f"{t}/.."),
    ("windows drive", lambda t: f"C:\\{t}"),
    ("windows reserved characters", lambda t: f"{t}:CON|<>"),
    ("glob characters", lambda t: f"{t}*?[a-z]"),
    ("redis hash tag", lambda t: f"{{{t}}}"),
    ("leading hash tag", lambda t: f"{{a}}{t}"),
    ("quotes and sql", lambda t: f"{t}'\";-- DROP TABLE checkpoints"),
    ("percent escapes", lambda t: f"{t}%2F%2e%2e%00%"),
    ("spaces", lambda t: f" {t} two  spaces "),
    ("unicode, emoji and right-to-left", lambda t: f"{t}-ünïcödé-日本語-🙂-שלום-مرحبا"),
    ("invisible format characters", lambda t: f"{t}\u200b\u200d\u202e\ufeff"),
    ("unicode separators", lambda t: f"{t}\u2028\u00a0\u3000"),
    ("file suffix", lambda t: f"{t}.json"),
    ("list and query delimiters", lambda t: f"{t},a;b|c&d=e,"),
    ("exactly 256 ascii characters", lambda t: t + "x" * (MAX_ID_LENGTH - len(t))),
    ("exactly 256 characters of 4-byte UTF-8", lambda t: t + "🙂" * (MAX_ID_LENGTH - len(t))),
)

# Strings that naive keying folds together: prefixes, separators, case, normalisation, spaces.
_LOOKALIKES: tuple[Builder, ...] = (
    lambda t: f"{t}-wf1",
    lambda t: f"{t}-wf10",
    lambda t: f"{t}-wf1/",
    lambda t: f"{t}-wf1 ",
    lambda t: f" {t}-wf1",
    lambda t: f"{t}-wf1.json",
    lambda t: f"{t}-wf1:x",  # extends wf1 past a key delimiter: a scan of "wf1:" takes it
    lambda t: f"{t}-wf1/x",  # the same with a path delimiter ("wf1/" as an object prefix)
    lambda t: f"{t}-a/b",
    lambda t: f"{t}-a_b",
    lambda t: f"{t}-a\\b",
    lambda t: f"{t}-a%2Fb",
    lambda t: f"{t}-a:b",
    lambda t: f"{t}-a%3Ab",  # a:b percent-escaped: an escape that leaves % as it is folds the two
    lambda t: f"{t}-a%253Ab",  # a%3Ab with its % escaped
    lambda t: f"{t}-a b",
    lambda t: f"{t}-a.b",
    lambda t: f"{t}-a-b",
    lambda t: f"{t}-{{a}}b",
    lambda t: f"{t}-Case",
    lambda t: f"{t}-case",
    lambda t: f"{t}-CASE",
    lambda t: f"{t}-\u00e9",  # é precomposed (NFC)
    lambda t: f"{t}-e\u0301",  # é decomposed (NFD)
    lambda t: f"{t}-\uff45",  # fullwidth e (NFKC folds it to e)
    lambda t: f"{t}-e",
    lambda t: f"{t}-\u00df",  # ß (casefolds to ss)
    lambda t: f"{t}-ss",
)


def _invalid_strings(t: str) -> tuple[str, ...]:
    """Invalid ids and names: empty, one character too long, control and surrogate characters."""
    return (
        "",
        t + "x" * (MAX_ID_LENGTH + 1 - len(t)),
        f"{t}\nline",
        f"{t}\x00nul",
        f"{t}\x7fdel",
        f"{t}\x85next-line",
        f"{t}\ud800surrogate",
    )


# Non-str values a caller might pass by mistake; None only where None is not a valid value.
_NON_STRINGS: tuple[object, ...] = (17, b"bytes-id")


def _show(value: object) -> str:
    if isinstance(value, str) and len(value) > 60:
        return f"<{len(value)} characters starting {value[:20]!r}>"
    return repr(value)


class _Problems:
    """Collects every deviation so one failure lists them all."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, problem: str) -> None:
        self.items.append(problem)

    async def attempt(self, call: str, operation: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
        """Run ``operation``; an exception becomes a problem and ``(False, None)``."""
        try:
            return True, await operation()
        except Exception as exc:
            self.add(f"{call} raised {type(exc).__name__}: {exc}")
            return False, None

    def check(self, summary: str) -> None:
        if self.items:
            shown = self.items[:8]
            more = f"; and {len(self.items) - len(shown)} more" if len(self.items) > len(shown) else ""
            fail(f"{summary}: " + "; ".join(shown) + more)


async def _expect_refused(
    problems: _Problems, call: str, field: str, attempt: Callable[[], Awaitable[Any]]
) -> bool:
    """Record a problem unless ``attempt`` raises InvalidCheckpointIdError naming ``field``.

    Returns True if the attempt returned normally (so the caller can clean up what it stored).
    """
    try:
        result = await attempt()
    except InvalidCheckpointIdError as exc:
        if exc.field != field:
            problems.add(f"{call} raised InvalidCheckpointIdError naming {exc.field!r}, not {field!r}")
        return False
    except Exception as exc:
        problems.add(f"{call} raised {type(exc).__name__}: {exc}")
        return False
    problems.add(f"{call} returned {_show(result)} instead of raising InvalidCheckpointIdError")
    return True


async def _discard(ctx: ClauseContext, checkpoint_id: object) -> None:
    # Remove what a storage wrongly accepted, so later runs and clauses do not meet it.
    with contextlib.suppress(Exception):
        await ctx.storage.delete(checkpoint_id)


async def _expect_not_found(ctx: ClauseContext, problems: _Problems, checkpoint_id: str, why: str) -> None:
    try:
        loaded = await ctx.storage.load(checkpoint_id)
    except Exception as exc:
        if not (is_not_found(exc)):
            problems.add(f"load({_show(checkpoint_id)}) {why} raised {type(exc).__name__}: {exc}")
        return
    problems.add(f"load({_show(checkpoint_id)}) {why} found checkpoint {_show(loaded.checkpoint_id)}")


@clause(
    "identifiers.hostile_ids_round_trip",
    "Valid but hostile checkpoint ids (path traversal, slashes, backslashes, globs, {hash tags}, quotes, "
    "% escapes, commas and other list delimiters, spaces, emoji, right-to-left text, exactly 256 "
    "characters) save, load, list and delete exactly as given; previous ids that read as a null "
    '("None", "null", "0") come back as given.',
)
async def hostile_ids_round_trip(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("hostile-ids")
    saved: list[Any] = []
    problems = _Problems()
    for what, build in _HOSTILE:
        checkpoint = ctx.checkpoint(workflow, checkpoint_id=build(workflow), state={"kind": what})
        ok, returned = await problems.attempt(
            f"save() of {what} id {_show(checkpoint.checkpoint_id)}", partial(ctx.storage.save, checkpoint)
        )
        if ok:
            saved.append(checkpoint)
            if returned != checkpoint.checkpoint_id:
                problems.add(
                    f"save() of {what} id {_show(checkpoint.checkpoint_id)} returned {_show(returned)}"
                )
    problems.check("hostile ids refused")
    for checkpoint in saved:
        what = checkpoint.state["kind"]
        ok, loaded = await problems.attempt(
            f"load() of {what} id", partial(ctx.storage.load, checkpoint.checkpoint_id)
        )
        if ok and loaded != checkpoint:
            problems.add(
                f"load() of {what} id {_show(checkpoint.checkpoint_id)} returned checkpoint "
                f"{_show(loaded.checkpoint_id)} with state {loaded.state!r}"
            )
    problems.check("hostile ids did not load back exactly")
    wanted = [c.checkpoint_id for c in saved]
    listed_ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow)
    ensure(
        listed_ids == wanted, f"list_checkpoint_ids() of hostile ids: expected {wanted!r}, got {listed_ids!r}"
    )
    listed = [c.checkpoint_id for c in await ctx.storage.list_checkpoints(workflow_name=workflow)]
    ensure(listed == wanted, f"list_checkpoints() of hostile ids: expected {wanted!r}, got {listed!r}")
    for checkpoint in saved:
        deleted = await ctx.storage.delete(checkpoint.checkpoint_id)
        if deleted is not True:
            problems.add(f"delete({_show(checkpoint.checkpoint_id)}) returned {deleted!r}")
        await _expect_not_found(ctx, problems, checkpoint.checkpoint_id, "after delete()")
    problems.check("hostile ids did not delete cleanly")
    ensure_equal(
        await ctx.storage.list_checkpoint_ids(workflow_name=workflow), [], "listing after deleting all"
    )
    await _null_like_previous_ids(ctx, problems)


_NULL_LIKE = ("None", "null", "nil", "NULL", "undefined", "0", "false", "[]")
"""Previous ids a store that writes a missing previous id as text could read back as none."""


async def _null_like_previous_ids(ctx: ClauseContext, problems: _Problems) -> None:
    # A previous id need not be stored (a dangling link), so these ids are never saved themselves.
    workflow = ctx.workflow_name("null-like-previous")
    saved = []
    for previous in _NULL_LIKE:
        checkpoint = ctx.checkpoint(workflow, previous_checkpoint_id=previous)
        ok, _ = await problems.attempt(
            f"save() with previous id {previous!r}", partial(ctx.storage.save, checkpoint)
        )
        if ok:
            saved.append(checkpoint)
    for checkpoint in saved:
        previous = checkpoint.previous_checkpoint_id
        ok, loaded = await problems.attempt(
            f"load() of a checkpoint whose previous id is {previous!r}",
            partial(ctx.storage.load, checkpoint.checkpoint_id),
        )
        if ok and getattr(loaded, "previous_checkpoint_id", None) != previous:
            problems.add(
                f"load() of a checkpoint whose previous id is {previous!r} returned previous id "
                f"{getattr(loaded, 'previous_checkpoint_id', loaded)!r}"
            )
    for checkpoint in saved:
        await _discard(ctx, checkpoint.checkpoint_id)
    problems.check("previous ids that read as a null did not come back as given")


@clause(
    "identifiers.hostile_names_round_trip",
    "Valid but hostile workflow names (the same strings as for ids) each list and return as latest "
    "exactly their own checkpoint, with the name unchanged.",
)
async def hostile_names_round_trip(ctx: ClauseContext) -> None:
    tag = ctx.workflow_name("hostile-names")
    problems = _Problems()
    saved: list[Any] = []
    for what, build in _HOSTILE:
        checkpoint = ctx.checkpoint(build(tag), state={"kind": what})
        ok, _ = await problems.attempt(f"save() in a {what} workflow", partial(ctx.storage.save, checkpoint))
        if ok:
            saved.append(checkpoint)
    problems.check("hostile workflow names refused")
    await _expect_each_workflow_holds_only_its_own(ctx, problems, saved, "kind")
    problems.check("hostile workflow names did not round trip")
    for checkpoint in saved:
        await _discard(ctx, checkpoint.checkpoint_id)


@clause(
    "identifiers.distinct_ids",
    "Checkpoint ids that differ only by a suffix, separator (/ \\ _ : %2F), a separator's percent escape "
    "(a:b, a%3Ab), case, Unicode normalisation or surrounding spaces are distinct checkpoints: each loads "
    "its own, deleting one keeps the others.",
)
async def distinct_ids(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("lookalike-ids")
    problems = _Problems()
    checkpoints: list[Any] = []
    for index, build in enumerate(_LOOKALIKES):
        checkpoint = ctx.checkpoint(workflow, checkpoint_id=build(workflow), state={"variant": index})
        ok, _ = await problems.attempt(
            f"save() of look-alike id {checkpoint.checkpoint_id!r}", partial(ctx.storage.save, checkpoint)
        )
        if ok:
            checkpoints.append(checkpoint)
    problems.check("look-alike ids could not all be saved")
    await _expect_each_loads_its_own(ctx, problems, checkpoints, "")
    problems.check("look-alike ids collide")
    wanted = [c.checkpoint_id for c in checkpoints]
    listed_ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow)
    ensure(
        listed_ids == wanted,
        f"list_checkpoint_ids() of look-alike ids: expected {wanted!r}, got {listed_ids!r}",
    )
    first, rest = checkpoints[0], checkpoints[1:]
    deleted = await ctx.storage.delete(first.checkpoint_id)
    ensure(deleted is True, f"delete({first.checkpoint_id!r}) returned {deleted!r}")
    await _expect_each_loads_its_own(ctx, problems, rest, f" after delete({first.checkpoint_id!r})")
    problems.check("deleting one look-alike id affected another")
    for checkpoint in rest:
        await _discard(ctx, checkpoint.checkpoint_id)


@clause(
    "identifiers.distinct_workflow_names",
    "Workflow names that differ only by a suffix (wf1, wf10), separator, a separator's percent escape, case, "
    "Unicode normalisation or surrounding spaces are distinct workflows: none lists or returns as latest "
    "another's checkpoints.",
)
async def distinct_workflow_names(ctx: ClauseContext) -> None:
    tag = ctx.workflow_name("lookalike-names")
    problems = _Problems()
    saved: list[Any] = []
    for index, build in enumerate(_LOOKALIKES):
        checkpoint = ctx.checkpoint(build(tag), state={"variant": index})
        ok, _ = await problems.attempt(
            f"save() in look-alike workflow {checkpoint.workflow_name!r}",
            partial(ctx.storage.save, checkpoint),
        )
        if ok:
            saved.append(checkpoint)
    problems.check("look-alike workflow names could not all be saved")
    await _expect_each_workflow_holds_only_its_own(ctx, problems, saved, "variant")
    problems.check("look-alike workflow names collide")
    for checkpoint in saved:
        await _discard(ctx, checkpoint.checkpoint_id)


async def _expect_each_loads_its_own(
    ctx: ClauseContext, problems: _Problems, saved: list[Any], when: str
) -> None:
    for checkpoint in saved:
        checkpoint_id = checkpoint.checkpoint_id
        ok, loaded = await problems.attempt(
            f"load({checkpoint_id!r}){when}", partial(ctx.storage.load, checkpoint_id)
        )
        if ok and loaded != checkpoint:
            problems.add(
                f"load({checkpoint_id!r}){when} returned {loaded.checkpoint_id!r} with state {loaded.state!r}"
            )


async def _expect_each_workflow_holds_only_its_own(
    ctx: ClauseContext, problems: _Problems, saved: list[Any], label: str
) -> None:
    """Each checkpoint in ``saved`` is alone in its workflow, by every read."""
    for checkpoint in saved:
        name = checkpoint.workflow_name
        which = f"workflow {_show(name)} ({label} {checkpoint.state[label]!r})"
        ok, listed_ids = await problems.attempt(
            f"list_checkpoint_ids() of {which}", partial(ctx.storage.list_checkpoint_ids, workflow_name=name)
        )
        if ok and listed_ids != [checkpoint.checkpoint_id]:
            problems.add(
                f"list_checkpoint_ids() of {which} returned {listed_ids!r}, expected only its own id"
            )
        ok, listed = await problems.attempt(
            f"list_checkpoints() of {which}", partial(ctx.storage.list_checkpoints, workflow_name=name)
        )
        if ok and listed != [checkpoint]:
            names = [c.workflow_name for c in listed]
            problems.add(f"list_checkpoints() of {which} returned checkpoints of workflows {names!r}")
        ok, latest = await problems.attempt(
            f"get_latest() of {which}", partial(ctx.storage.get_latest, workflow_name=name)
        )
        if ok and latest != checkpoint:
            problems.add(
                f"get_latest() of {which} returned a checkpoint of {getattr(latest, 'workflow_name', None)!r}"
            )


@clause(
    "identifiers.invalid_ids_rejected",
    "save(), load() and delete() refuse a checkpoint id that is empty, 257 characters long, contains a "
    "control or surrogate character (\\n \\x00 \\x7f \\x85 \\ud800) or is not a str, with "
    "InvalidCheckpointIdError naming checkpoint_id.",
)
async def invalid_ids_rejected(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("invalid-ids")
    problems = _Problems()
    for value in (*_invalid_strings(workflow), *_NON_STRINGS, None):
        shown = _show(value)
        checkpoint = ctx.checkpoint(workflow, checkpoint_id=value)
        if await _expect_refused(
            problems, f"save() of id {shown}", "checkpoint_id", partial(ctx.storage.save, checkpoint)
        ):
            await _discard(ctx, value)
        await _expect_refused(problems, f"load({shown})", "checkpoint_id", partial(ctx.storage.load, value))
        await _expect_refused(
            problems, f"delete({shown})", "checkpoint_id", partial(ctx.storage.delete, value)
        )
    problems.check("invalid checkpoint ids not refused")


@clause(
    "identifiers.invalid_names_rejected",
    "save(), list_checkpoints(), list_checkpoint_ids() and get_latest() refuse a workflow name that is "
    "empty, 257 characters long, contains a control or surrogate character or is not a str, with "
    "InvalidCheckpointIdError naming workflow_name.",
)
async def invalid_names_rejected(ctx: ClauseContext) -> None:
    problems = _Problems()
    invalid: tuple[Any, ...] = (*_invalid_strings(ctx.workflow_name("invalid-names")), *_NON_STRINGS, None)
    for value in invalid:
        shown = _show(value)
        checkpoint = ctx.checkpoint(value)
        if await _expect_refused(
            problems, f"save() in workflow {shown}", "workflow_name", partial(ctx.storage.save, checkpoint)
        ):
            await _discard(ctx, checkpoint.checkpoint_id)
        for method in ("list_checkpoints", "list_checkpoint_ids", "get_latest"):
            call = getattr(ctx.storage, method)
            await _expect_refused(
                problems,
                f"{method}(workflow_name={shown})",
                "workflow_name",
                partial(call, workflow_name=value),
            )
    problems.check("invalid workflow names not refused")


@clause(
    "identifiers.invalid_previous_id_rejected",
    "save() refuses a checkpoint whose previous_checkpoint_id is neither None nor a valid id, with "
    "InvalidCheckpointIdError naming previous_checkpoint_id.",
)
async def invalid_previous_id_rejected(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("invalid-previous")
    problems = _Problems()
    for value in (*_invalid_strings(workflow), *_NON_STRINGS):
        checkpoint = ctx.checkpoint(workflow, previous_checkpoint_id=value)
        if await _expect_refused(
            problems,
            f"save() with previous_checkpoint_id {_show(value)}",
            "previous_checkpoint_id",
            partial(ctx.storage.save, checkpoint),
        ):
            await _discard(ctx, checkpoint.checkpoint_id)
    problems.check("invalid previous ids not refused")


@clause(
    "identifiers.refused_save_stores_nothing",
    "A save() refused for an invalid id or previous id stores nothing: the workflow's listing and latest "
    "are unchanged, and no truncated or cleaned-up form of the id loads.",
)
async def refused_save_stores_nothing(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("refused")
    anchor = ctx.checkpoint(workflow, timestamp="2000-01-01T00:00:00+00:00")
    await ctx.storage.save(anchor)
    problems = _Problems()
    for value in _invalid_strings(workflow):
        # Timestamps newer than the anchor's, so a storage ordering by time would also show them.
        attempts = (
            ctx.checkpoint(workflow, checkpoint_id=value, timestamp="2030-01-01T00:00:00+00:00"),
            ctx.checkpoint(workflow, previous_checkpoint_id=value, timestamp="2030-01-01T00:00:00+00:00"),
        )
        for checkpoint in attempts:
            with contextlib.suppress(Exception):
                await ctx.storage.save(checkpoint)
        lookalikes = {value[:MAX_ID_LENGTH], "".join(ch for ch in value if ch.isprintable())} - {value, ""}
        for lookalike in lookalikes:
            await _expect_not_found(ctx, problems, lookalike, f"after refusing id {_show(value)}")
    listed = await ctx.storage.list_checkpoint_ids(workflow_name=workflow)
    if listed != [anchor.checkpoint_id]:
        problems.add(
            f"list_checkpoint_ids() holds {len(listed)} checkpoints, expected only the one valid save"
        )
    latest = await ctx.storage.get_latest(workflow_name=workflow)
    if getattr(latest, "checkpoint_id", None) != anchor.checkpoint_id:
        problems.add(
            f"get_latest() returned {_show(getattr(latest, 'checkpoint_id', None))}, not the valid save"
        )
    for stray in listed:
        if stray != anchor.checkpoint_id:
            await _discard(ctx, stray)
    problems.check("refused saves left traces")


_LONG_ID_LENGTHS = (255, 254, 250, 200, 129, 128, 127, 64)
"""Lengths just under the limit and at common truncation points (key columns, hash-tag caps)."""


def _long_ids(tag: str) -> list[str]:
    """Distinct long ids that share long prefixes: at the limit differing only in the last
    character (ASCII and 4-byte UTF-8), and shorter ones each a prefix of the next longer."""
    at_limit = [tag + "x" * (MAX_ID_LENGTH - 1 - len(tag)) + last for last in ("a", "b", "🙂", "😀")]
    wide = [tag + "🙂" * (MAX_ID_LENGTH - 1 - len(tag)) + last for last in ("a", "🙃")]
    shorter = [tag + "y" * (length - len(tag)) for length in _LONG_ID_LENGTHS]
    return at_limit + wide + shorter


@clause(
    "identifiers.long_ids_distinct_and_whole",
    "Ids up to 256 characters that share all but their last character, or are prefixes of one another, "
    "stay distinct and whole through save, load, listing and delete.",
)
async def long_ids_distinct_and_whole(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("long-ids")
    ids = _long_ids(f"{workflow_name}-")
    checkpoints = [ctx.checkpoint(workflow_name, checkpoint_id=i, state={"id": i}) for i in ids]
    for checkpoint in checkpoints:
        try:
            await ctx.storage.save(checkpoint)
        except Exception as exc:
            fail(
                f"save() of the long id {_tail(checkpoint.checkpoint_id)} raised {type(exc).__name__}: {exc}"
            )

    async def expect_whole(remaining: list[Any], when: str) -> None:
        for checkpoint in remaining:
            wanted = checkpoint.checkpoint_id
            try:
                loaded = await ctx.storage.load(wanted)
            except Exception as exc:
                fail(
                    f"load() of the {len(wanted)}-character id {_tail(wanted)} {when} raised "
                    f"{type(exc).__name__}: {exc}"
                )
            got = (loaded.checkpoint_id, loaded.state.get("id"))
            ensure(
                got == (wanted, wanted),
                f"load() of the {len(wanted)}-character id {_tail(wanted)} {when} returned the checkpoint "
                f"{_tail(got[0])} holding {_tail(str(got[1]))}: long ids collide or are truncated",
            )
        listed = await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name)
        expected = [c.checkpoint_id for c in remaining]
        if list(listed) != expected:
            unexpected = [_tail(i) for i in listed if i not in expected]
            absent = [_tail(i) for i in expected if i not in listed]
            fail(
                f"list_checkpoint_ids() {when} does not list the long ids exactly, in save order: "
                f"absent {absent}, unexpected {unexpected}"
            )

    await expect_whole(checkpoints, "after saving them all")
    # A delete by a truncated key takes every id sharing the prefix with it.
    doomed = [checkpoints[1], checkpoints[6]]  # one at the limit, and the 255-character one
    for checkpoint in doomed:
        ensure_equal(
            await ctx.storage.delete(checkpoint.checkpoint_id),
            True,
            f"delete({_tail(checkpoint.checkpoint_id)})",
        )
    await expect_whole([c for c in checkpoints if c not in doomed], "after deleting two of them")


def _tail(value: str) -> str:
    """A long id, shown by its length and last characters (where the ids differ)."""
    return repr(value) if len(value) <= 24 else f"'...{value[-12:]}' (length {len(value)})"


@clause(
    "identifiers.long_workflow_names_distinct",
    "Workflow names of 256 characters that differ only in their last character each list, and return as "
    "latest, their own checkpoints only.",
)
async def long_workflow_names_distinct(ctx: ClauseContext) -> None:
    at_limit = _long_ids(f"{ctx.workflow_name('long-names')}-")[:6]
    names = at_limit[:2] + at_limit[4:]  # ASCII and 4-byte UTF-8, differing in the last character
    saved: dict[str, list[str]] = {}
    for name in names:
        chain = await ctx.save_chain(name, 1)
        saved[name] = [c.checkpoint_id for c in chain]
    for name, ids in saved.items():
        listed = await ctx.storage.list_checkpoint_ids(workflow_name=name)
        ensure(
            list(listed) == ids,
            f"list_checkpoint_ids() of the 256-character workflow name {_tail(name)} returned "
            f"{len(listed)} ids, not its own {len(ids)}: long names collide or are truncated",
        )
        latest = await ctx.storage.get_latest(workflow_name=name)
        ensure(
            getattr(latest, "checkpoint_id", None) == ids[-1]
            and getattr(latest, "workflow_name", None) == name,
            f"get_latest() of the 256-character workflow name {_tail(name)} returned another workflow's "
            "checkpoint: long names collide or are truncated",
        )
