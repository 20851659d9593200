"""A store is hostile: what a crafted or rewritten body can make a reading process do.

Each test here failed on the code before the hardening: unbounded zstd, attribute traversal in
type keys, any agent_framework class allowed, reads believing a body over its index entry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import struct
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import msgspec
import pytest
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storages import (
    CheckpointCorruptedError,
    CheckpointTypeNotAllowedError,
    InMemoryCheckpointStorage,
    InvalidCheckpointError,
    WorkflowCheckpoint,
)
from storages.codec import DEFAULT_MAX_COMPRESSION_RATIO, CheckpointCodec, OpaqueValue

REPO_ROOT = Path(__file__).resolve().parent.parent
_TRAILER = struct.Struct(">B8sB2s")
_FLAG_ZSTD = 0x01
DECODE_MEMORY_FACTOR = 128
"""docs/contract.md: decoding a body of n bytes builds at most about 128 x n bytes of objects."""


def checkpoint(**fields: Any) -> WorkflowCheckpoint:
    fields.setdefault("workflow_name", "wf")
    fields.setdefault("graph_signature_hash", "sig")
    return WorkflowCheckpoint(**fields)


def framed(payload: bytes, flags: int = 0) -> bytes:
    """A version-3 body: the payload, then its trailer."""
    return payload + _TRAILER.pack(flags, xxhash.xxh3_64_digest(payload, flags), 3, b"CK")


def payload_of(body: bytes) -> bytes:
    return body[: -_TRAILER.size]


def flags_of(body: bytes) -> int:
    return body[-_TRAILER.size]


def peak_bytes_while(action: Any) -> tuple[int, Any]:
    tracemalloc.start()
    try:
        try:
            outcome: Any = action()
        except Exception as exc:
            outcome = exc
        return tracemalloc.get_traced_memory()[1], outcome
    finally:
        tracemalloc.stop()


# ---------------------------------------------------------------------------- decompression bombs


def test_a_zstd_bomb_is_refused_before_it_is_expanded() -> None:
    payload = payload_of(CheckpointCodec().encode_checkpoint(checkpoint(checkpoint_id="bomb")))
    inflated = payload + b"\x00" * 300_000_000  # 300 MB behind a few KB: the example
    bomb = framed(zstandard.ZstdCompressor(level=19).compress(inflated), _FLAG_ZSTD)
    del inflated
    assert len(bomb) < 20_000
    # A codec that never compresses reads compressed bodies too (migration), and is bounded alike.
    peak, outcome = peak_bytes_while(lambda: CheckpointCodec().decode_checkpoint(bomb, checkpoint_id="bomb"))
    assert isinstance(outcome, CheckpointCorruptedError), outcome
    assert outcome.checkpoint_id == "bomb"
    assert "declares" in str(outcome)
    assert "limit" in str(outcome)
    assert peak < 2_000_000


def test_a_zstd_frame_that_hides_its_size_is_refused() -> None:
    payload = payload_of(CheckpointCodec().encode_checkpoint(checkpoint(checkpoint_id="hidden")))
    body = framed(zstandard.ZstdCompressor(write_content_size=False).compress(payload), _FLAG_ZSTD)
    with pytest.raises(CheckpointCorruptedError, match="does not declare its decompressed size"):
        CheckpointCodec().decode_checkpoint(body, checkpoint_id="hidden")


def test_a_zstd_frame_that_lies_about_its_size_is_refused() -> None:
    payload = payload_of(CheckpointCodec().encode_checkpoint(checkpoint(checkpoint_id="liar")))
    compressed = bytearray(zstandard.ZstdCompressor().compress(payload + b"\x00" * 5000))
    honest = CheckpointCodec(compress_threshold=1)
    params = zstandard.get_frame_parameters(bytes(compressed))
    assert params.content_size == len(payload) + 5000
    with pytest.raises(CheckpointCorruptedError):
        honest.decode_checkpoint(framed(bytes(compressed[:-8]), _FLAG_ZSTD), checkpoint_id="liar")


def test_every_body_a_compressing_codec_writes_reads_back_even_when_it_compresses_too_well() -> None:
    codec = CheckpointCodec(compress_threshold=64)
    state = {"zeros": b"\x00" * 2_000_000, "text": "a" * 500_000}
    body = codec.encode_checkpoint(checkpoint(checkpoint_id="dense", state=state))
    assert not flags_of(body) & _FLAG_ZSTD  # over the ratio a reader allows: stored as it is
    assert codec.decode_checkpoint(body, checkpoint_id="dense").state == state
    ordinary = {"rows": [{"n": index, "label": f"row {index}"} for index in range(2000)]}
    small = codec.encode_checkpoint(checkpoint(checkpoint_id="ordinary", state=ordinary))
    assert flags_of(small) & _FLAG_ZSTD
    assert len(payload_of(small)) * DEFAULT_MAX_COMPRESSION_RATIO >= 2000
    assert codec.decode_checkpoint(small, checkpoint_id="ordinary").state == ordinary


def test_max_payload_bytes_bounds_what_is_written_and_what_is_read() -> None:
    small = CheckpointCodec(max_payload_bytes=10_000)
    with pytest.raises(InvalidCheckpointError, match="max_payload_bytes"):
        small.encode_checkpoint(checkpoint(state={"blob": b"x" * 20_000}))
    body = CheckpointCodec().encode_checkpoint(checkpoint(checkpoint_id="big", state={"blob": b"x" * 20_000}))
    with pytest.raises(CheckpointCorruptedError, match="max_payload_bytes") as caught:
        small.decode_checkpoint(body, checkpoint_id="big")
    assert caught.value.checkpoint_id == "big"
    with pytest.raises(ValueError, match="max_payload_bytes"):
        CheckpointCodec(max_payload_bytes=0)


# ---------------------------------------------------------------------------- bounded decoding


def _crafted_payloads() -> st.SearchStrategy[bytes]:
    """msgpack built to amplify: many empty containers, sets and deep ext nesting."""
    units = st.sampled_from(
        [
            b"\x90",  # []
            b"\x80",  # {}
            b"\xd4\x02\x90",  # ext set of []
            b"\xd4\x03\x90",  # ext frozenset of []
            b"\xd4\x01\x90",  # ext tuple of []
            b"\xc0",
            b"\xa0",
        ]
    )
    return st.builds(
        lambda unit, count: b"\xdd" + count.to_bytes(4, "big") + unit * count,
        units,
        st.integers(min_value=1, max_value=20_000),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=_crafted_payloads())
def test_decoding_a_crafted_value_stays_within_the_documented_memory_factor(payload: bytes) -> None:
    body = framed(payload)
    codec = CheckpointCodec()
    peak, _ = peak_bytes_while(lambda: codec.decode_value(body))
    assert peak <= DECODE_MEMORY_FACTOR * len(body) + 64_000


def _valid_body() -> bytes:
    state = {"n": 1, "t": (1, 2), "s": {3}, "d": {1: "x"}, "nested": checkpoint(checkpoint_id="child")}
    return CheckpointCodec().encode_checkpoint(checkpoint(checkpoint_id="root", state=state))


VALID_BODY = _valid_body()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_bodies_with_recomputed_checksums_raise_only_typed_errors(data: st.DataObject) -> None:
    payload = bytearray(payload_of(VALID_BODY))
    for _ in range(data.draw(st.integers(min_value=1, max_value=8))):
        position = data.draw(st.integers(min_value=0, max_value=len(payload) - 1))
        payload[position] = data.draw(st.integers(min_value=0, max_value=255))
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(min_value=0, max_value=len(payload)))
        payload = payload[:cut] + data.draw(st.binary(max_size=64))
    body = framed(bytes(payload))  # an attacker recomputes the checksum
    peak, outcome = peak_bytes_while(lambda: CheckpointCodec().decode_checkpoint(body, checkpoint_id="root"))
    assert peak <= DECODE_MEMORY_FACTOR * len(body) + 256_000
    if isinstance(outcome, Exception):
        assert isinstance(outcome, (CheckpointCorruptedError, CheckpointTypeNotAllowedError)), repr(outcome)


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=2048))
def test_random_payloads_raise_only_typed_errors(payload: bytes) -> None:
    with contextlib.suppress(CheckpointCorruptedError, CheckpointTypeNotAllowedError):
        CheckpointCodec().decode_checkpoint(framed(payload), checkpoint_id="random")


# ---------------------------------------------------------------------------- the exact allow-list


def _body_with_ext(code: int, key: str, state: Any) -> bytes:
    """A checkpoint body whose state['v'] is an extension value naming ``key``."""
    inner = msgspec.msgpack.encode([key, state])
    wire = [1, "native", "wf", "sig", "crafted", None, "t", {}, {"v": msgspec.msgpack.Ext(code, inner)}]
    wire += [{}, 0, {}, "1.0"]
    return framed(msgspec.msgpack.encode(wire))


_EXT_ENUM, _EXT_DATACLASS, _EXT_PYDANTIC, _EXT_CUSTOM = 13, 14, 15, 16

TRAVERSING_KEYS = [
    # attribute chains through modules MAF imports, to classes outside the package
    "agent_framework.observability:trace.SpanKind",
    "agent_framework._workflows._events:logging.Logger",
    "agent_framework._types:BaseModel",
    "agent_framework:WorkflowBuilder",  # a re-export, and not a type MAF writes into checkpoints
    "agent_framework._workflows._checkpoint_encoding:_RestrictedUnpickler",
    "agent_framework._workflows._workflow:Workflow",  # MAF's own, but never in a checkpoint
    "asyncio.sslproto:SSLProtocolState",
    "os:system",
    "builtins:eval",
]


@pytest.mark.parametrize("key", TRAVERSING_KEYS)
@pytest.mark.parametrize("code", [_EXT_ENUM, _EXT_DATACLASS, _EXT_PYDANTIC, _EXT_CUSTOM])
def test_keys_outside_the_exact_list_are_refused(key: str, code: int) -> None:
    with pytest.raises(CheckpointTypeNotAllowedError) as caught:
        CheckpointCodec().decode_checkpoint(_body_with_ext(code, key, {"x": 1}), checkpoint_id="crafted")
    assert caught.value.type_key == key


_DECODE_IN_FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys
    from storages import CheckpointCorruptedError, CheckpointTypeNotAllowedError
    from storages.codec import CheckpointCodec
    preload, hex_bodies = json.loads(sys.stdin.read())
    for name in preload:
        __import__(name)
    codec = CheckpointCodec()
    bodies = [bytes.fromhex(h) for h in hex_bodies]
    before = set(sys.modules)
    outcomes = []
    for body in bodies:
        try:
            codec.decode_checkpoint(body, checkpoint_id="crafted")
            outcomes.append("decoded")
        except (CheckpointTypeNotAllowedError, CheckpointCorruptedError) as exc:
            outcomes.append(type(exc).__name__)
    print(json.dumps({"new": sorted(set(sys.modules) - before), "outcomes": outcomes}))
    """
)


def _decode_in_fresh_process(bodies: list[bytes], preload: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _DECODE_IN_FRESH_PROCESS],
        input=json.dumps([preload, [body.hex() for body in bodies]]),
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=True,
        timeout=120,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_decoding_crafted_bodies_imports_no_module() -> None:
    bodies = [_body_with_ext(code, key, {"x": 1}) for key in TRAVERSING_KEYS for code in (13, 14, 15, 16)]
    result = _decode_in_fresh_process(bodies, preload=[])
    assert result["new"] == []
    assert set(result["outcomes"]) == {"CheckpointTypeNotAllowedError"}


def test_a_pending_request_naming_a_class_outside_the_list_is_refused_without_imports() -> None:
    """A WorkflowEvent is on MAF's list (its module is imported to build it); the request and
    response types it names are checked against the allow-list like any other key."""
    event_state = {
        "type": "request_info",
        "data": None,
        "origin": None,
        "state": None,
        "details": None,
        "executor_id": "x",
        "iteration": None,
        "request_id": "r",
        "source_executor_id": "x",
        "request_type": "pydantic.main:BaseModel",
        "response_type": "email.mime.text:MIMEText",
    }
    event = _body_with_ext(_EXT_CUSTOM, "agent_framework._workflows._events:WorkflowEvent", event_state)
    result = _decode_in_fresh_process([event], preload=["agent_framework._workflows._events"])
    assert result["new"] == []
    assert result["outcomes"] == ["CheckpointCorruptedError"]


@dataclasses.dataclass
class Ticket:
    title: str


class Priority(enum.Enum):
    LOW = 1


class Outer:
    @dataclasses.dataclass
    class Inner:
        n: int


def test_nested_classes_resolve_but_only_where_they_are_defined() -> None:
    codec = CheckpointCodec(allowed_modules=[__name__])
    cp = checkpoint(checkpoint_id="n", state={"i": Outer.Inner(3)})
    assert CheckpointCodec(allowed_modules=[__name__]).decode_checkpoint(
        codec.encode_checkpoint(cp), checkpoint_id="n"
    ).state == {"i": Outer.Inner(3)}
    # The same class named through another module that merely imports it is refused.
    alias = _body_with_ext(_EXT_DATACLASS, "tests.test_codec:dataclasses.dataclass", {"n": 1})
    with pytest.raises(CheckpointTypeNotAllowedError):
        CheckpointCodec(allowed_modules=["tests"]).decode_checkpoint(alias, checkpoint_id="crafted")


def test_a_type_refused_on_load_is_not_called_corrupted_and_verify_can_read_it_opaquely() -> None:
    body = CheckpointCodec(allowed_types=[Ticket, Priority]).encode_checkpoint(
        checkpoint(checkpoint_id="t", state={"ticket": Ticket("x"), "p": Priority.LOW})
    )
    with pytest.raises(CheckpointTypeNotAllowedError) as caught:
        CheckpointCodec().decode_checkpoint(body, checkpoint_id="t")
    assert not isinstance(caught.value, CheckpointCorruptedError)
    assert str(caught.value).startswith("Checkpoint deserialization blocked for type")
    assert "allowed_checkpoint_types" in str(caught.value)
    opaque = CheckpointCodec().decode_checkpoint(body, checkpoint_id="t", construct_types=False)
    assert opaque.state == {
        "ticket": OpaqueValue(f"{__name__}:Ticket", {"title": "x"}),
        "p": OpaqueValue(f"{__name__}:Priority", 1),
    }
    # Damage is still damage, opaque or not.
    with pytest.raises(CheckpointCorruptedError):
        CheckpointCodec().decode_checkpoint(body[:-1] + b"\x00", checkpoint_id="t", construct_types=False)


def test_in_memory_storage_trusts_only_what_it_saved() -> None:
    codec = InMemoryCheckpointStorage().codec
    assert codec.decode_value(codec.encode_value([Ticket("x")])) == [Ticket("x")]
    # A key it never saved is not resolved, although that class exists.
    with pytest.raises(CheckpointTypeNotAllowedError):
        codec.decode_value(CheckpointCodec(allowed_types=[Priority]).encode_value(Priority.LOW))
