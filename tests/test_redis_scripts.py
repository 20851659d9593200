"""The Lua scripts' typed calls (storages/redis/scripts.py): what is sent, and what is refused."""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass

import pytest

from storages.redis import script_sha
from storages.redis.scripts import (
    CALLS,
    SCRIPTS,
    Key,
    Load,
    Save,
    SavedRecord,
    SaveOne,
    ScriptCall,
    binding,
    script_text,
)

pytestmark = pytest.mark.redis


def _save_one(**changes: object) -> SaveOne:
    fields: dict[str, object] = {
        "pointer": "p:{id}:loc",
        "record": "p:{wf}:r:id",
        "counter": "p:{wf}:seq",
        "top": "p:{wf}:top",
        "signature_index": "p:{wf}:sig:s",
        "workflow": "wf",
        "id": "id",
        "body": b"\x00body",
        "digest": "d",
        "signature": "s",
        "previous": None,
        "fenced": True,
        "expected": "before",
    }
    return SaveOne(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_call_encodes_its_keys_and_typed_arguments_in_declaration_order() -> None:
    keys, args = _save_one().encode()
    assert keys == ["p:{id}:loc", "p:{wf}:r:id", "p:{wf}:seq", "p:{wf}:top", "p:{wf}:sig:s"]
    assert args == ["wf", "id", b"\x00body", "d", "s", "", "1", "before", ""]
    _, staged = _save_one(body=b"", stage="p:{wf}:stage:id").encode()
    assert staged == ["wf", "id", b"", "d", "s", "", "1", "before", "p:{wf}:stage:id"]


def test_the_lua_binding_names_each_input_where_the_encoder_puts_it() -> None:
    lines = binding(SaveOne).splitlines()
    assert "local pointer = KEYS[1]" in lines
    assert "local signature_index = KEYS[5]" in lines
    # ARGV[1..3] are the common inputs; the call's own start at ARGV[4].
    assert "local workflow = ARGV[4]" in lines
    assert "local fenced = ARGV[10] == '1'" in lines
    assert "local expected = ARGV[11]" in lines
    assert "local stage = ARGV[12]" in lines


def test_rows_are_sent_field_by_field_and_read_back_by_name() -> None:
    record = SavedRecord("id", "wf", None, "s", b"b", "d", None, 0, 7)
    keys, args = Save(counter="p:{wf}:seq", home="wf", fenced=False, expected=None, records=[record]).encode()
    assert keys == ["p:{wf}:seq"]
    assert args == ["wf", "0", "", "id", "wf", "", "s", b"b", "d", "", "0", "7"]
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


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"fenced": False, "expected": None},
        {"previous": "before"},
        {"previous": ""},
        {"expected": ""},
        {"body": b"", "stage": "p:{wf}:stage:id"},
    ],
)
def test_save_one_encodes_as_the_generic_walk_does(changes: dict[str, object]) -> None:
    call = _save_one(**changes)
    assert call.encode() == ScriptCall.encode(call)


@pytest.mark.parametrize("home", [None, "wf"])
def test_load_encodes_as_the_generic_walk_does(home: str | None) -> None:
    call = Load(route="p:{id}:loc", id="id", given_home=home, inline_limit=65536)
    assert call.encode() == ScriptCall.encode(call)


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
