"""How a typed script call becomes the text the server runs and the arguments it is sent.

Each script is a ``.lua`` file in ``scripts/`` (package data) and a frozen dataclass here, a
:class:`ScriptCall`, whose fields are the script's named inputs: fields made with :func:`key` are
its ``KEYS`` (the first routes the call to its cluster slot), the others its ``ARGV``. The Lua
side never counts positions: the text sent to the server is the libraries the call names, then
a binding generated from the dataclass (``local workflow = ARGV[4]``, with the field's type
decoded: ``int`` with ``tonumber``, ``bool`` as ``'1'``, ``None`` as ``''``), then the file. So the
Python encoder and the Lua names cannot drift apart, and a call with a field of the wrong type is
refused before it is sent.

Every script also gets three common inputs, ``P`` (the key prefix), ``INLINE`` (true on plain
Redis, where a script may reach keys of any slot; false on a cluster, own slot only) and ``TTL``
(milliseconds, 0 for none), supplied by the connection, not by the call.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import re
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, TypeVar

from .keys import lua_layout

Encoded = bytes
"""An argument as sent to the server: bytes, which redis-py passes on at its first check, where
a str costs it five type checks and an encode (a save sends some twenty arguments)."""

_COMMON = ("P", "INLINE", "TTL")
_COMMON_BINDING = "local P, INLINE, TTL = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])"


_KEY, _ROWS, _REST = "key", "rows", "rest"
Key = Annotated[str, _KEY]
"""A field that is one of the script's KEYS, in declaration order."""
Rest = Annotated[Sequence[str], _REST]
"""The last field: a sequence of str, sent one argument each."""
_Row = TypeVar("_Row")
Rows = Annotated[Sequence[_Row], _ROWS]
"""The last field: a sequence of row dataclasses, each sent as its fields in order."""


# Argument types a call may declare, by kind; the binding decodes each kind as _LUA_DECODE says.
_KINDS: dict[Any, str] = {
    str: "text",
    bytes: "bytes",
    int: "int",
    bool: "flag",
    str | None: "optional",
    int | None: "optional_int",
}
_LUA_DECODE = {
    "text": "{}",
    "bytes": "{}",
    "optional": "{}",
    "optional_int": "{}",
    "int": "tonumber({})",
    "flag": "{} == '1'",
}
# Per kind: the test a value passes, and its encoding (Python expressions of a value ``{}``).
_ACCEPTS = {
    "text": "type({}) is str",
    "bytes": "type({}) is bytes",
    "int": "type({}) is int",
    "flag": "type({}) is bool",
    "optional": "({} is None or type({}) is str)",
    "optional_int": "({} is None or type({}) is int)",
}
_ENCODES = {
    "text": "{}.encode()",
    "bytes": "{}",
    "int": "b'%d' % {}",
    "flag": "(b'1' if {} else b'0')",
    "optional": "(b'' if {} is None else {}.encode())",
    "optional_int": "(b'' if {} is None else b'%d' % {})",
}


_TESTS: dict[str, Callable[[Any], bool]] = {
    kind: eval(f"lambda value: {test.replace('{}', 'value')}")  # noqa: S307 - the fixed tests above
    for kind, test in _ACCEPTS.items()
}


def _refuse(call: Any) -> None:
    """Raise the TypeError naming the first input of ``call`` its kind refuses."""
    spec = _spec(type(call))
    named = [(name, kind, getattr(call, name)) for name, kind in spec.args]
    if spec.tail_role == _REST:
        named += [(spec.tail or "", "text", value) for value in getattr(call, spec.tail or "")]
    elif spec.tail_role == _ROWS:
        for row in getattr(call, spec.tail or ""):
            named += [(name, kind, getattr(row, name)) for name, kind in spec.row_args]
    for name, kind, value in named:
        if not _TESTS[kind](value):
            raise TypeError(f"script argument {name}: expected {kind}, got {type(value).__name__} {value!r}")
    raise AssertionError(f"{type(call).__name__}: an input was refused, yet each passes its test")


@dataclass(frozen=True)
class _Spec:
    keys: tuple[str, ...]
    args: tuple[tuple[str, str], ...]
    """(name, kind) of each scalar argument, in order."""
    tail: str | None
    tail_role: str | None
    row_args: tuple[tuple[str, str], ...]
    """(name, kind) of each field of a row, for a ``rows`` tail."""


def _kinds_of(cls: type) -> tuple[tuple[str, str], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, _KINDS[hints[f.name]]) for f in dataclasses.fields(cls))


def _role(hint: Any) -> tuple[str, Any]:
    """(role, type) of a field's annotation: ``key``, ``rows``, ``rest`` or ``arg``."""
    metadata = getattr(hint, "__metadata__", ())
    if metadata:
        return str(metadata[0]), typing.get_args(hint)[0]
    return "arg", hint


_SPECS: dict[type, _Spec] = {}


def _spec(cls: type) -> _Spec:
    found = _SPECS.get(cls)
    if found is None:
        found = _SPECS[cls] = _read_spec(cls)
    return found


def _read_spec(cls: type) -> _Spec:
    hints = typing.get_type_hints(cls, include_extras=True)
    keys: list[str] = []
    args: list[tuple[str, str]] = []
    tail = tail_role = None
    row_args: tuple[tuple[str, str], ...] = ()
    for f in dataclasses.fields(cls):
        role, kind = _role(hints[f.name])
        if tail is not None:
            raise TypeError(f"{cls.__name__}.{f.name}: a Rows or Rest field must come last")
        if role == _KEY:
            keys.append(f.name)
        elif role == "arg":
            args.append((f.name, _KINDS[kind]))
        else:
            tail, tail_role = f.name, role
            if role == _ROWS:
                (row_type,) = typing.get_args(kind)
                row_args = _kinds_of(row_type)
    for name in (*keys, *(name for name, _ in args), *(name for name, _ in row_args)):
        if name in _COMMON:
            raise TypeError(f"{cls.__name__}.{name}: that name is one of the common inputs")
    return _Spec(tuple(keys), tuple(args), tail, tail_role, row_args)


def _lua_value(kind: str, position: str) -> str:
    return _LUA_DECODE[kind].format(f"ARGV[{position}]")


def binding(cls: type) -> str:
    """The Lua lines that name a call's inputs, generated from its fields."""
    spec = _spec(cls)
    lines = [_COMMON_BINDING]
    lines += [f"local {name} = KEYS[{index}]" for index, name in enumerate(spec.keys, start=1)]
    position = len(_COMMON) + 1
    for name, kind in spec.args:
        lines.append(f"local {name} = {_lua_value(kind, str(position))}")
        position += 1
    if spec.tail_role == _REST:
        lines += [
            f"local {spec.tail} = {{}}",
            f"for i = {position}, #ARGV do {spec.tail}[#{spec.tail} + 1] = ARGV[i] end",
        ]
    elif spec.tail_role == _ROWS:
        width = len(spec.row_args)
        fields = ", ".join(
            f"{name} = {_lua_value(kind, f'b + {offset}')}"
            for offset, (name, kind) in enumerate(spec.row_args)
        )
        lines += [
            f"local {spec.tail} = {{}}",
            f"for b = {position}, #ARGV, {width} do {spec.tail}[#{spec.tail} + 1] = {{{fields}}} end",
        ]
    return "\n".join(lines) + "\n"


def _library(name: str) -> str:
    text = (
        importlib.resources.files(__package__).joinpath("scripts").joinpath(f"{name}.lua").read_text("utf-8")
    )
    # The key-building functions are written from the layout's one definition, not a file.
    return lua_layout() + text if name == "keys" else text


class ScriptCall:
    """One call of one script; subclasses are frozen dataclasses naming the script's inputs."""

    __slots__ = ()
    script: ClassVar[str]
    """The file ``scripts/<script>.lua``, and the name the connection registers it under."""
    libraries: ClassVar[tuple[str, ...]] = ("keys",)
    """``scripts/<library>.lua`` files whose local functions the script uses, loaded first."""

    def encode(self) -> tuple[list[Encoded], list[Encoded]]:
        """KEYS and the call's own ARGV (the common inputs are added by the connection); an
        input of the wrong type raises TypeError. The class's encoder is written on first use and
        replaces this method (:func:`encoder`)."""
        cls = type(self)
        compiled = encoder(cls)
        setattr(cls, "encode", compiled)  # noqa: B010 - the class's own method, replaced once
        return compiled(self)


def encoder(cls: type) -> Callable[[Any], tuple[list[Encoded], list[Encoded]]]:
    """A call class's encode, written from its fields: each argument read once, tested and
    encoded inline as its kind says (_ACCEPTS, _ENCODES); keys are sent as they are. A loop
    over the fields with a call per argument was a fifth of the client's work on a save, so
    the code is generated once per class instead, and a refused input is named by
    :func:`_refuse`."""
    spec = _spec(cls)
    lines = ["def encode(self):"]
    tests: list[str] = []
    keys: list[str] = []
    for name in spec.keys:
        # Key names come from RedisKeys, never from a caller: sent untested.
        keys.append(f"self.{name}.encode()")
    encoded: list[str] = []
    for index, (name, kind) in enumerate(spec.args):
        lines.append(f"    a{index} = self.{name}")
        tests.append(_ACCEPTS[kind].replace("{}", f"a{index}"))
        encoded.append(_ENCODES[kind].replace("{}", f"a{index}"))
    lines += [f"    if not ({' and '.join(tests) or 'True'}):", "        _refuse(self)"]
    lines.append(f"    args = [{', '.join(encoded)}]")
    if spec.tail_role == _REST:
        lines += [
            f"    for value in self.{spec.tail}:",
            "        if type(value) is not str:",
            "            _refuse(self)",
            "        args.append(value.encode())",
        ]
    elif spec.tail_role == _ROWS:
        row_tests, row_encoded = [], []
        lines.append(f"    for row in self.{spec.tail}:")
        for index, (name, kind) in enumerate(spec.row_args):
            lines.append(f"        r{index} = row.{name}")
            row_tests.append(_ACCEPTS[kind].replace("{}", f"r{index}"))
            row_encoded.append(_ENCODES[kind].replace("{}", f"r{index}"))
        lines += [
            f"        if not ({' and '.join(row_tests)}):",
            "            _refuse(self)",
            f"        args += ({', '.join(row_encoded)},)",
        ]
    lines.append(f"    return [{', '.join(keys)}], args")
    namespace: dict[str, Any] = {"_refuse": _refuse}
    exec("\n".join(lines), namespace)  # noqa: S102 - text written above from the class's fields
    return namespace["encode"]  # type: ignore[no-any-return]


_LUA_FUNCTION = re.compile(r"^local function (\w+)", re.MULTILINE)
_LUA_COMMENT = re.compile(r"--.*")
"""A Lua comment to the end of its line (no script holds ``--`` inside a string)."""


def _functions(library: str) -> list[tuple[str, str]]:
    """(name, text) of each top-level function of a library file, with the comment lines just
    above it; one-liners end on their line, others at an ``end`` in column 0."""
    found: list[tuple[str, str]] = []
    block: list[str] = []
    name: str | None = None
    for line in library.splitlines(keepends=True):
        if name is None and line.startswith("--"):
            block.append(line)
            continue
        match = _LUA_FUNCTION.match(line)
        if name is None and match is None:
            block = []  # a stray line between functions: never part of one
            continue
        if match is not None and name is None:
            name = match.group(1)
            block.append(line)
            if not line.rstrip().endswith(" end"):
                continue
        else:
            block.append(line)
            if line.rstrip() != "end":
                continue
        assert name is not None
        found.append((name, "".join(block)))
        block, name = [], None
    return found


def _used_functions(libraries: list[str], body: str) -> str:
    """The library functions ``body``'s code names (its comments aside), directly or through one
    another, in file order: the server builds a closure for every local function on every call,
    so unused ones cost."""
    functions = [item for library in libraries for item in _functions(library)]
    code = {name: _LUA_COMMENT.sub("", source) for name, source in functions}
    needed: set[str] = set()
    pending = [_LUA_COMMENT.sub("", body)]
    while pending:
        text = pending.pop()
        for name, _ in functions:
            if name not in needed and re.search(rf"\b{name}\b", text):
                needed.add(name)
                pending.append(code[name])
    return "".join(source for name, source in functions if name in needed)


def script_text(call: type[ScriptCall]) -> str:
    """The whole text sent to the server for one script: the binding, the library functions it
    uses, the script."""
    libraries = [_library(name) for name in call.libraries]
    spec = _spec(call)
    inputs = {*spec.keys, *(name for name, _ in spec.args), *(name for name, _ in spec.row_args)}
    if spec.tail is not None:
        inputs.add(spec.tail)
    clashes = inputs & {name for library in libraries for name in _LUA_FUNCTION.findall(library)}
    if clashes:
        raise TypeError(f"{call.__name__}: inputs {sorted(clashes)} would hide library functions")
    body = _library(call.script)
    parts = [binding(call), _used_functions(libraries, body), body]
    return "".join(part if part.endswith("\n") or not part else part + "\n" for part in parts)


__all__ = ["Encoded", "Key", "Rest", "Rows", "ScriptCall", "binding", "encoder", "script_text"]
