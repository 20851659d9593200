"""The Lua scripts' typed calls (storages/redis/scripts.py): what is sent, and what is refused."""

from __future__ import annotations

import dataclasses
import importlib.resources
import re
from dataclasses import dataclass

import pytest
import redis_servers
from redis.asyncio import Redis

from storages.records import CheckpointRecord
from storages.redis import RedisKeys, escape, keys, script_sha
from storages.redis.keys import nested_member
from storages.redis.scripts import (
    CALLS,
    SCRIPTS,
    Key,
    ListAdd,
    Load,
    Save,
    SavedRecord,
    SaveOne,
    ScriptCall,
    binding,
    script_text,
)

pytestmark = pytest.mark.redis


def _save_one(stage: str | None = None, **changes: object) -> SaveOne:
    record: dict[str, object] = {
        "id": "id",
        "workflow": "wf",
        "previous": None,
        "signature": "s",
        "body": b"\x00body",
        "digest": "d",
        "container": None,
        "position": 0,
        "sequence": None,
    }
    call: dict[str, object] = {
        "pointer": "p:{id}:loc",
        "record": "p:{wf}:r:id",
        "counter": "p:{wf}:seq",
        "top": "p:{wf}:top",
        "signature_index": "p:{wf}:sig:s",
        "fenced": True,
        "expected": "before",
        "stage": stage,
    }
    for name, value in changes.items():
        (record if name in record else call)[name] = value
    return SaveOne(**call, saved=[SavedRecord(**record)])  # type: ignore[arg-type]


def test_a_call_encodes_its_keys_and_typed_arguments_in_declaration_order() -> None:
    keys, args = _save_one().encode()
    assert keys == [b"p:{id}:loc", b"p:{wf}:r:id", b"p:{wf}:seq", b"p:{wf}:top", b"p:{wf}:sig:s"]
    assert args == [b"1", b"before", b"", b"id", b"wf", b"", b"s", b"\x00body", b"d", b"", b"0", b""]
    _, staged = _save_one(body=b"", stage="p:{wf}:stage:id").encode()
    assert staged == [b"1", b"before", b"p:{wf}:stage:id", b"id", b"wf", b"", b"s", b"", b"d", b"", b"0", b""]


def test_the_lua_binding_names_each_input_where_the_encoder_puts_it() -> None:
    lines = binding(SaveOne).splitlines()
    assert "local pointer = KEYS[1]" in lines
    assert "local signature_index = KEYS[5]" in lines
    # ARGV[1..3] are the common inputs; the call's own start at ARGV[4].
    assert "local fenced = ARGV[4] == '1'" in lines
    assert "local expected = ARGV[5]" in lines
    assert "local stage = ARGV[6]" in lines
    assert "for b = 7, #ARGV, 9 do" in binding(SaveOne)


def test_a_save_sends_each_record_as_one_definition_says() -> None:
    # The general save and save_one send a record's fields from one definition (SavedRecord.of),
    # so a field added there reaches both scripts.
    record = CheckpointRecord(
        checkpoint_id="id",
        workflow_name="wf",
        previous_checkpoint_id="before",
        graph_signature_hash="s",
        body=b"body",
        digest="d",
        container_id=None,
        root_id=None,
        position=0,
    )
    row = SavedRecord.of(record)
    assert SavedRecord.of(record, 7) == dataclasses.replace(row, sequence=7)
    assert SavedRecord.of(record, staged=True) == dataclasses.replace(row, body=b"")
    _, general = Save(counter="c", home="wf", fenced=False, expected=None, records=[row]).encode()
    _, one = _save_one(**{f.name: getattr(row, f.name) for f in dataclasses.fields(row)}).encode()
    assert general[3:] == one[3:] == [b"id", b"wf", b"before", b"s", b"body", b"d", b"", b"0", b""]


def test_rows_are_sent_field_by_field_and_read_back_by_name() -> None:
    record = SavedRecord("id", "wf", None, "s", b"b", "d", None, 0, 7)
    keys, args = Save(counter="p:{wf}:seq", home="wf", fenced=False, expected=None, records=[record]).encode()
    assert keys == [b"p:{wf}:seq"]
    assert args == [b"wf", b"0", b"", b"id", b"wf", b"", b"s", b"b", b"d", b"", b"0", b"7"]
    assert "position = tonumber(ARGV[b + 7])" in binding(Save)
    assert "for b = 7, #ARGV, 9 do" in binding(Save)


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"fenced": "yes"}, "fenced: expected flag"),
        ({"body": "text"}, "body: expected bytes"),
        ({"workflow": 3}, "workflow: expected text"),
        ({"previous": 4.5}, "previous: expected optional"),
    ],
)
def test_an_argument_of_the_wrong_type_is_refused_before_it_is_sent(
    changes: dict[str, object], says: str
) -> None:
    with pytest.raises(TypeError, match=says):
        _save_one(**changes).encode()


def test_each_kind_is_encoded_as_its_binding_decodes_it() -> None:
    # Every kind, the rows' optional int included, through the one encoder of each call class.
    load = Load(route="p:{id}:loc", id="id", given_home=None, inline_limit=65536)
    assert load.encode() == ([b"p:{id}:loc"], [b"id", b"", b"65536"])
    assert dataclasses.replace(load, given_home="wf").encode()[1] == [b"id", b"wf", b"65536"]
    rows = [
        SavedRecord("a", "wf", "before", "s", b"x", "d", "a", 2, None),
        SavedRecord("b", "wf", None, "s", b"y", "d", None, 0, 12),
    ]
    _, args = Save(counter="c", home="wf", fenced=True, expected="e", records=rows).encode()
    assert args[:12] == [b"wf", b"1", b"e", b"a", b"wf", b"before", b"s", b"x", b"d", b"a", b"2", b""]
    assert args[12:] == [b"b", b"wf", b"", b"s", b"y", b"d", b"", b"0", b"12"]
    assert ListAdd(index="p:workflows", complete=False, names=["a", "b"]).encode() == (
        [b"p:workflows"],
        [b"0", b"a", b"b"],
    )


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (Load(route="p", id=b"id", given_home=None, inline_limit=0), "id: expected text"),  # type: ignore[arg-type]
        (ListAdd(index="i", complete=True, names=["a", 3]), "names: expected text"),  # type: ignore[list-item]
        (
            Save(
                counter="c",
                home="wf",
                fenced=False,
                expected=None,
                records=[SavedRecord("a", "wf", None, "s", b"x", "d", None, 0, "7")],  # type: ignore[arg-type]
            ),
            "sequence: expected optional_int",
        ),
        (Load(route="p", id="id", given_home=None, inline_limit=True), "inline_limit: expected int"),
    ],
)
def test_an_argument_a_rest_item_or_a_row_field_of_the_wrong_type_is_refused(
    call: ScriptCall, says: str
) -> None:
    with pytest.raises(TypeError, match=says):
        call.encode()


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"id": b"id"}, "id: expected text"),
        ({"given_home": 4.5}, "given_home: expected optional"),
        ({"inline_limit": "65536"}, "inline_limit: expected int"),
    ],
)
def test_load_refuses_an_argument_of_the_wrong_type(changes: dict[str, object], says: str) -> None:
    fields: dict[str, object] = {
        "route": "p:{id}:loc",
        "id": "id",
        "given_home": None,
        "inline_limit": 0,
        **changes,
    }
    with pytest.raises(TypeError, match=says):
        Load(**fields).encode()  # type: ignore[arg-type]


def test_an_input_may_not_hide_a_library_function() -> None:
    @dataclass(frozen=True, slots=True)
    class Clashing(ScriptCall):
        script = "load"
        libraries = ("keys", "nested")
        route: Key
        tag: str

    with pytest.raises(TypeError, match=r"\['tag'\] would hide library functions"):
        script_text(Clashing)


def test_a_script_is_sent_the_library_functions_its_code_calls_and_no_other() -> None:
    # Each function sent is a closure the server builds on every call: one only a comment names
    # is not sent (latest's comments speak of the save's index_top_level, load's code of nothing
    # in lineage.lua).
    sent = _sent_functions()
    assert {"latest_of", "descendants"} <= sent["latest"]
    assert "index_top_level" in SCRIPTS["latest"]
    assert "index_top_level" not in sent["latest"]
    assert {"latest_of", "drop_family"} <= sent["prune"]
    assert not {"latest_of", "index_top_level"} & sent["load"]


def _sent_functions() -> dict[str, set[str]]:
    """Script name -> the library functions sent with it."""
    return {name: set(re.findall(r"^local function (\w+)", SCRIPTS[name], re.MULTILINE)) for name in SCRIPTS}


def test_the_latest_is_chosen_by_one_lua_function() -> None:
    # get_latest, the fences (both saves, and the cluster's answer for an id stored elsewhere)
    # and prune ask lineage.lua's latest_of; nothing else walks the successor index or the top
    # index's order, so a change of the rule is a change of latest_of alone.
    sent = _sent_functions()
    assert all("latest_of" in sent[name] for name in ("latest", "latest_head", "save", "save_one", "prune"))
    walks = re.compile(r"'(ZREVRANGEBYLEX|ZREVRANK)'")
    folder = importlib.resources.files("storages.redis").joinpath("scripts")
    for entry in folder.iterdir():
        if entry.name.endswith(".lua") and entry.name != "lineage.lua":
            assert not walks.search(entry.read_text("utf-8")), entry.name
    lineage = folder.joinpath("lineage.lua").read_text("utf-8")
    # Split at each function's start: name, then the rest of its text (its body, past the name).
    parts = re.split(r"^local function (\w+)", lineage, flags=re.MULTILINE)[1:]
    walkers = {name for name, text in zip(parts[::2], parts[1::2], strict=True) if walks.search(text)}
    assert walkers == {"latest_of"}


def test_every_script_is_a_packaged_lua_file_and_every_file_is_used() -> None:
    folder = importlib.resources.files("storages.redis").joinpath("scripts")
    files = {entry.name.removesuffix(".lua") for entry in folder.iterdir() if entry.name.endswith(".lua")}
    used = {call.script for call in CALLS} | {name for call in CALLS for name in call.libraries}
    assert files == used
    for call in CALLS:
        text = SCRIPTS[call.script]
        assert text.startswith("local P, INLINE, TTL = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])\n")
        # Past the binding, no script reads an argument by position.
        body = text[len(binding(call)) :]
        assert not re.search(r"ARGV\[\d", body), call.script
        assert len(script_sha(call.script)) == 40


# ---------------------------------------------------------------------- the key layout, once

_MARKERS = "|".join(
    sorted(
        {keys.SEQUENCE, keys.TOP, keys.NEXT, keys.NESTED, keys.TOMBS, keys.SIGNATURE, keys.RECORD}
        | {keys.STAGE, keys.CHILDREN, keys.FAMILY, keys.LOCATION, keys.PRUNED, keys.WORKFLOWS}
    )
)
_QUOTED = re.compile(r"""(?:[rbf]{0,2})("[^"\n]*"|'[^'\n]*')""")
_SPELLED = re.compile(rf"(?:^.?:|\}}:)(?:{_MARKERS})(?:$|.?:|.$)|\}}:\{{|:\{{.$|^.?\}}:")
"""A quoted text that spells part of a key name: ``:top``, ``':r:'``, ``f"{tag}:{kind}"``,
``':{'`` (a hash tag opened by hand), ``'}:'``."""


def _spellings(source: str) -> list[str]:
    """The string literals of ``source`` (Python or Lua) that spell part of a key name."""
    found = []
    for line in source.splitlines():
        code = line.split("--", 1)[0] if line.lstrip().startswith("--") else line
        if code.lstrip().startswith("#"):
            continue
        found += [quoted for quoted in _QUOTED.findall(code) if _SPELLED.search(quoted)]
    return found


def test_the_spelling_check_finds_a_key_built_by_hand() -> None:
    # Each way a key was once spelled beside the layout module, which the check below must find.
    for line in (
        'key = f"{tag}:r:{escaped}"',
        'top = f"{tag}:top"',
        'pipeline.exists(*(f"{tag}:{kind}" for kind in kinds))',
        "local key = H .. ':r:' .. escaped",
        "redis.call('DEL', top, H .. ':next')",
        "local index = P .. ':workflows'",
        "local function lockey(id) return P .. ':{' .. esc(id) .. '}:loc' end",
    ):
        assert _spellings(line), line
    for line in ('raise ValueError(f"{name}: bad")', "redis.call('HSET', key, 'r', '1')", "'%%%02X'"):
        assert not _spellings(line), line


def test_no_key_is_spelled_outside_the_layout_module() -> None:
    package = importlib.resources.files("storages.redis")
    sources = [entry for entry in package.iterdir() if entry.name.endswith(".py")]
    sources += [entry for entry in package.joinpath("scripts").iterdir() if entry.name.endswith(".lua")]
    assert len(sources) > 20
    spelled = {
        entry.name: found
        for entry in sources
        if entry.name != "keys.py" and (found := _spellings(entry.read_text("utf-8")))
    }
    assert spelled == {}
    # The layout module itself is where they are: the check would find them there.
    assert _spellings(package.joinpath("keys.py").read_text("utf-8"))


_NAMES = ["plain", "a:b", "{x}", "100%", "%3A", "w:{x}%:}{", "é ü", ""]


@pytest.mark.redis
async def test_the_scripts_build_every_key_name_as_the_layout_module_does() -> None:
    # The generated Lua functions, run on the server, against RedisKeys for the same inputs.
    prefix = "p:{odd}%"
    layout = RedisKeys(prefix)
    probe = (
        keys.lua_layout()
        + "local w, id = ARGV[1], ARGV[2]\nlocal h = tag(w)\n"
        + "return {h, seqkey(h), topkey(h), nextkey(h), nestedkey(h), tombskey(h), sigkey(h, id),"
        + " rkey(h, id), kkey(h, id), fkey(h, id), stagekey(h, id), rprefix(h) .. esc(id), lockey(id),"
        + " prunedkey(id), workflowskey(), nmember(w, id), esc(id), tostring(unescaped(id)),"
        + " nextkey_beside(topkey(h))}"
    )
    client = Redis.from_url(redis_servers.redis_url())
    try:
        for name in _NAMES:
            for checkpoint_id in _NAMES:
                lua = [
                    item.decode()
                    for item in await client.eval(f"local P = {prefix!r}\n" + probe, 0, name, checkpoint_id)
                ]
                tag = layout.tag(name)
                assert lua == [
                    tag,
                    layout.sequence(name),
                    layout.top(name),
                    layout.under(tag, keys.NEXT),
                    layout.nested(name),
                    layout.tombstones(name),
                    layout.signature(name, checkpoint_id),
                    layout.record(name, checkpoint_id),
                    layout.children_under(tag, checkpoint_id),
                    layout.under(tag, keys.FAMILY) + ":" + escape(checkpoint_id),
                    layout.stage_under(tag, checkpoint_id),
                    layout.record(name, checkpoint_id),
                    layout.location(checkpoint_id),
                    layout.pruned(checkpoint_id),
                    layout.workflows,
                    nested_member(name, checkpoint_id),
                    escape(checkpoint_id),
                    str(escape(checkpoint_id) == checkpoint_id).lower(),
                    layout.under(tag, keys.NEXT),
                ], (name, checkpoint_id)
    finally:
        await client.aclose()
