"""Property tests: any value built from the codec's built-in types comes back equal with identical
types, and no single damaged byte is ever decoded into different data."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint as MafWorkflowCheckpoint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storages import (
    CheckpointCorruptedError,
    InvalidCheckpointError,
    InvalidCheckpointIdError,
    WorkflowCheckpoint,
)
from storages.codec import CheckpointCodec
from storages.codec.decoding import RECORD_VERSION
from storages.codec.registry import NATIVE_CHECKPOINT_TAG
from storages.contract import CHECKPOINT_FIELDS

SameTypes = Callable[[Any, Any], bool]

PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

CODEC = CheckpointCodec()

# ---------------------------------------------------------------------------- strategies

fixed_offsets = st.builds(
    dt.timezone,
    st.timedeltas(
        min_value=-dt.timedelta(hours=23, minutes=59), max_value=dt.timedelta(hours=23, minutes=59)
    ),
)
zones = st.none() | st.just(dt.UTC) | fixed_offsets | st.timezones()
folds = st.integers(min_value=0, max_value=1)

datetimes = st.builds(lambda value, fold: value.replace(fold=fold), st.datetimes(timezones=zones), folds)
times = st.builds(lambda value, fold: value.replace(fold=fold), st.times(timezones=zones), folds)

ints = (
    st.integers()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1])
)

hashable_atoms = (
    st.none()
    | st.booleans()
    | ints
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | datetimes
    | st.dates()
    | times
    | st.timedeltas()
    | st.uuids()
    | st.decimals(allow_nan=False, allow_infinity=False)
)

hashables = st.recursive(
    hashable_atoms,
    lambda inner: (
        st.tuples(inner, inner) | st.lists(inner, max_size=3).map(tuple) | st.frozensets(inner, max_size=3)
    ),
    max_leaves=6,
)

dict_keys = st.text() | ints | st.tuples(hashables, hashables) | hashables

values = st.recursive(
    hashable_atoms | st.binary().map(bytearray),
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.dictionaries(dict_keys, children, max_size=4)
        | st.sets(hashables, max_size=4)
        | st.frozensets(hashables, max_size=4)
    ),
    max_leaves=20,
)

identifiers = st.text(alphabet=st.characters(exclude_categories=["Cc", "Cs"]), min_size=1, max_size=40)


def checkpoints(cls: type[Any]) -> st.SearchStrategy[Any]:
    return st.builds(
        cls,
        workflow_name=identifiers,
        graph_signature_hash=st.text(),
        checkpoint_id=identifiers,
        previous_checkpoint_id=st.none() | identifiers,
        timestamp=st.text(),
        messages=st.dictionaries(st.text(), st.lists(values, max_size=3), max_size=3),
        state=st.dictionaries(st.text(), values, max_size=4),
        pending_request_info_events=st.dictionaries(st.text(), values, max_size=2),
        iteration_count=ints,
        metadata=st.dictionaries(st.text(), values, max_size=3),
        version=st.text(),
    )


# ---------------------------------------------------------------------------- properties


def decode_or_error(body: bytes, *, checkpoint_id: str) -> Any:
    """The decoded checkpoint, or the CheckpointCorruptedError decoding raised."""
    try:
        return CODEC.decode_checkpoint(body, checkpoint_id=checkpoint_id)
    except CheckpointCorruptedError as error:
        return error


@PROPERTY_SETTINGS
@given(value=values)
def test_any_built_in_value_round_trips_with_identical_types(same_types: SameTypes, value: Any) -> None:
    decoded = CODEC.decode_value(CODEC.encode_value(value))
    assert same_types(decoded, value)


@PROPERTY_SETTINGS
@given(value=values)
def test_any_built_in_value_round_trips_inside_a_checkpoint(same_types: SameTypes, value: Any) -> None:
    cp = WorkflowCheckpoint(
        workflow_name="wf", graph_signature_hash="sig", state={"v": value}, messages={"e": [value]}
    )
    decoded = CODEC.decode_checkpoint(CODEC.encode_checkpoint(cp), checkpoint_id=cp.checkpoint_id)
    assert same_types(decoded, cp)


@pytest.mark.parametrize("cls", [WorkflowCheckpoint, MafWorkflowCheckpoint], ids=["ours", "maf"])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_any_checkpoint_round_trips_as_its_own_class(
    same_types: SameTypes, cls: type[Any], data: st.DataObject
) -> None:
    cp = data.draw(checkpoints(cls))
    decoded = CODEC.decode_checkpoint(CODEC.encode_checkpoint(cp), checkpoint_id=cp.checkpoint_id)
    assert type(decoded) is cls
    assert same_types(decoded, cp)


@PROPERTY_SETTINGS
@given(cp=checkpoints(WorkflowCheckpoint), data=st.data())
def test_no_single_damaged_byte_decodes_into_different_data(
    same_types: SameTypes, cp: WorkflowCheckpoint, data: st.DataObject
) -> None:
    body = CODEC.encode_checkpoint(cp)
    index = data.draw(st.integers(min_value=0, max_value=len(body) - 1), label="index")
    replacement = data.draw(
        st.integers(min_value=0, max_value=255).filter(lambda b: b != body[index]), label="byte"
    )
    damaged = body[:index] + bytes([replacement]) + body[index + 1 :]
    outcome = decode_or_error(damaged, checkpoint_id="damaged")
    if isinstance(outcome, CheckpointCorruptedError):
        assert outcome.checkpoint_id == "damaged"
    else:
        assert same_types(outcome, cp), f"byte {index} set to {replacement} decoded into different data"


# ------------------------------------------------------- encode refuses what decode refuses

lone_surrogates = st.builds(
    lambda before, surrogate, after: before + surrogate + after,
    st.text(max_size=3),
    st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"]),
    st.text(max_size=3),
)
"""Strings no UTF-8 body can hold: what the issue's wrapper met as an id."""

anything = values | lone_surrogates | st.dictionaries(st.text(), lone_surrogates, min_size=1, max_size=2)
"""A field value of any type, right or wrong for the field."""

right_values = {
    "workflow_name": identifiers,
    "graph_signature_hash": st.text(),
    "checkpoint_id": identifiers,
    "previous_checkpoint_id": st.none() | identifiers,
    "timestamp": st.text(),
    "messages": st.dictionaries(st.text(), st.lists(values, max_size=2), max_size=2),
    "state": st.dictionaries(st.text(), values, max_size=3),
    "pending_request_info_events": st.dictionaries(st.text(), values, max_size=2),
    "iteration_count": ints,
    "metadata": st.dictionaries(st.text(), values, max_size=2),
    "version": st.text(),
}
ID_FIELDS = ("workflow_name", "checkpoint_id", "previous_checkpoint_id")


@st.composite
def field_values(draw: st.DrawFn) -> dict[str, Any]:
    """Every field right, then a few of them (possibly none) anything at all."""
    fields = {name: draw(right_values[name], label=name) for name in CHECKPOINT_FIELDS}
    for name in draw(st.lists(st.sampled_from(CHECKPOINT_FIELDS), max_size=3, unique=True), label="wrong"):
        fields[name] = draw(anything, label=f"{name} (any type)")
    return fields


def unchecked_body(fields: dict[str, Any]) -> bytes | None:
    """The body a codec that checked nothing would write for these fields (the record through
    encode_value, which packs without the field checks); None if no body can hold them."""
    try:
        return CODEC.encode_value([RECORD_VERSION, NATIVE_CHECKPOINT_TAG, *fields.values()])
    except InvalidCheckpointError:
        return None


@PROPERTY_SETTINGS
@given(fields=field_values())
def test_encode_refuses_exactly_what_decode_refuses(same_types: SameTypes, fields: dict[str, Any]) -> None:
    checkpoint = WorkflowCheckpoint(**fields)
    unchecked = unchecked_body(fields)
    refusal: InvalidCheckpointError | None = None
    try:
        body = CODEC.encode_checkpoint(checkpoint)
    except InvalidCheckpointError as refused:
        refusal = refused
    if refusal is not None:
        # A typed refusal naming a field (or the path inside one) whose value is what decode refuses.
        named = (refusal.field or "").removeprefix("checkpoint.")
        field = next((name for name in CHECKPOINT_FIELDS if named.startswith(name)), None)
        assert field is not None, f"the refusal names no field: {refusal}"
        assert isinstance(refusal, InvalidCheckpointIdError) == (field in ID_FIELDS and named == field)
        if unchecked is not None:  # what encode refused, decode refuses
            with pytest.raises(CheckpointCorruptedError, match=f"field {field} has type"):
                CODEC.decode_checkpoint(unchecked, checkpoint_id="unchecked")
        return
    decoded = CODEC.decode_checkpoint(body, checkpoint_id="any")  # what encode took, decode takes
    assert same_types(decoded, checkpoint)
    assert unchecked is not None
    assert same_types(CODEC.decode_checkpoint(unchecked, checkpoint_id="any"), checkpoint)


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("checkpoint_id", 5, InvalidCheckpointIdError),
        ("checkpoint_id", "\ud800", InvalidCheckpointIdError),
        ("workflow_name", "a\udfff", InvalidCheckpointIdError),
        ("previous_checkpoint_id", 7, InvalidCheckpointIdError),
        ("graph_signature_hash", None, InvalidCheckpointError),
        ("iteration_count", "3", InvalidCheckpointError),
        ("state", [], InvalidCheckpointError),
        ("version", 1.0, InvalidCheckpointError),
    ],
)
def test_a_field_decode_would_refuse_is_refused_at_encode_naming_it(
    field: str, value: Any, error: type
) -> None:
    fields: dict[str, Any] = {"workflow_name": "wf", "graph_signature_hash": "sig", "checkpoint_id": "a"}
    checkpoint = WorkflowCheckpoint(**{**fields, field: value})
    embedding = WorkflowCheckpoint(**{**fields, "checkpoint_id": "outer", "state": {"inner": checkpoint}})
    for encode in (
        CODEC.encode_checkpoint,
        CODEC.encode_checkpoint_tree,
        lambda cp: CODEC.encode_checkpoint(cp, sealed=True),
        lambda cp: CODEC.encode_checkpoint_fields(
            WorkflowCheckpoint, tuple(getattr(cp, n) for n in CHECKPOINT_FIELDS)
        ),
    ):
        with pytest.raises(error) as refused:
            encode(checkpoint)
        assert refused.value.field == field
    # Embedded (inline or as a nested record): refused too, never written for a read to refuse.
    for encode in (CODEC.encode_checkpoint, CODEC.encode_checkpoint_tree):
        with pytest.raises(InvalidCheckpointError) as refused:
            encode(embedding)
        assert field in str(refused.value.field)
