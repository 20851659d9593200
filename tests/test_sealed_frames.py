"""Bodies framed for a seal (storages/codec/frame.py, FLAG_SEALED): a keyed save frames its codec
bodies without a checksum, since the seal's MAC covers every byte, and only a read that has just
verified that MAC accepts such a body. Sealed bodies written with a CRC (before the flag, format
version 1) still read, and a verified read does not compute their CRC again."""

from __future__ import annotations

import warnings
import zlib
from pathlib import Path
from typing import Any

import pytest
import xxhash

from storages import (
    CheckpointCorruptedError,
    CheckpointTamperedError,
    InMemoryCheckpointStorage,
    IntegrityKeys,
    WorkflowCheckpoint,
    open_storage,
)
from storages.codec import CheckpointCodec, EncodedCheckpoint
from storages.codec import frame as framing
from storages.codec.overrides import WithoutSealed, body_codec
from storages.integrity import TamperKind, is_sealed, record_mac, split_sealed
from storages.tools.verify import verify

KEY = b"sealed-frame-test-key-0123456789"


def checkpoint(workflow: str, previous: str | None = None, **state: object) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=workflow, graph_signature_hash="sig", previous_checkpoint_id=previous, state=dict(state)
    )


def flags_and_check(body: bytes) -> tuple[int, bytes]:
    """A version-3 body's flags and checksum, from its trailer."""
    end = len(body) - framing.TRAILER_SIZE
    return body[end], body[end + 1 : end + 9]


async def raw_of(storage: Any, checkpoint_id: str) -> bytes:
    raw = await storage.read_raw_body(checkpoint_id)
    assert raw is not None
    return bytes(raw)


def with_crc(body: bytes) -> bytes:
    """The same codec body as written before the flag: format version 1, FLAG_SEALED cleared,
    its CRC computed."""
    payload = body[: -framing.TRAILER_SIZE]
    flags = framing.flags_of(body) & ~framing.FLAG_SEALED
    return b"CK\x01" + bytes((flags,)) + framing.CRC.pack(zlib.crc32(payload)) + payload


def resealed(checkpoint_id: str, raw: bytes, body: bytes) -> bytes:
    """``raw``'s seal header around ``body``, signed again with KEY (what a writer would store)."""
    _, parts = split_sealed(checkpoint_id, raw)
    return parts.header + record_mac(KEY, checkpoint_id, parts.header, body) + body


async def test_a_keyed_save_frames_its_body_for_the_seal_without_a_crc(storage_url: str) -> None:
    async with open_storage(storage_url, integrity_key=KEY) as storage:
        item = checkpoint("wf", step=1)
        await storage.save(item)
        raw = await raw_of(storage, item.checkpoint_id)
        assert is_sealed(raw)
        body = split_sealed(item.checkpoint_id, raw)[1].body
        flags, check = flags_and_check(body)
        assert flags & framing.FLAG_SEALED
        assert check == bytes(8)
        assert (await storage.load(item.checkpoint_id)).state == {"step": 1}
        async with storage.new_handle() as cold:  # a handle that never saw it: a full check
            assert (await cold.load(item.checkpoint_id)).state == {"step": 1}
            assert (await cold.list_checkpoints(workflow_name="wf"))[0].state == {"step": 1}
        report = await verify(storage)
        assert report.ok, report.findings


async def test_a_keyless_save_still_writes_a_checksum(storage_url: str) -> None:
    async with open_storage(storage_url) as storage:
        item = checkpoint("wf")
        await storage.save(item)
        body = await raw_of(storage, item.checkpoint_id)
        flags, check = flags_and_check(body)
        assert not flags & framing.FLAG_SEALED
        assert check == xxhash.xxh3_64_digest(body[: -framing.TRAILER_SIZE])


async def test_a_body_framed_for_a_seal_is_refused_without_a_verified_seal(storage_url: str) -> None:
    async with open_storage(storage_url, integrity_key=KEY) as storage:
        item = checkpoint("wf", step=1)
        await storage.save(item)
        checkpoint_id = item.checkpoint_id
        body = split_sealed(checkpoint_id, await raw_of(storage, checkpoint_id))[1].body
        codec = storage.codec
        # A raw body without its seal, decoded or checked by a tool.
        for refuse in (
            lambda: codec.decode_checkpoint(body, checkpoint_id=checkpoint_id),
            lambda: codec.decode_checkpoint(body, checkpoint_id=checkpoint_id, construct_types=False),
            lambda: CheckpointCodec.verify_frame(body, checkpoint_id=checkpoint_id),
            lambda: CheckpointCodec.nested_ref_ids(body, checkpoint_id=checkpoint_id),
        ):
            with pytest.raises(CheckpointCorruptedError, match="without a verified seal") as caught:
                refuse()
            assert caught.value.checkpoint_id == checkpoint_id
            assert not isinstance(caught.value, CheckpointTamperedError)
        # Given the verified seal, the same bytes read.
        assert codec.decode_checkpoint(body, checkpoint_id=checkpoint_id, sealed=True).state == {"step": 1}
        # Stored without its seal: an unsigned body, which migration mode reads only with a CRC.
        await storage.write_raw_body(checkpoint_id, body)
        migrating = storage.with_integrity_key(IntegrityKeys(KEY, accept_unsigned=True))
        async with migrating:
            with pytest.raises(CheckpointCorruptedError, match="without a verified seal") as caught:
                await migrating.load(checkpoint_id)
            assert caught.value.checkpoint_id == checkpoint_id
            assert not isinstance(caught.value, CheckpointTamperedError)
            report = await verify(migrating)
            assert [finding.checkpoint_ids for finding in report.findings] == [(checkpoint_id,)]
            assert "without a verified seal" in report.findings[0].message
        async with storage.with_integrity_key(None) as keyless:
            with pytest.raises(CheckpointCorruptedError, match="without a verified seal"):
                await keyless.load(checkpoint_id)


async def test_a_sealed_body_written_with_a_crc_still_reads_and_its_crc_is_not_computed_again(
    storage_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_storage(storage_url, integrity_key=KEY) as storage:
        first = checkpoint("wf", step=0)
        await storage.save(first)
        second = checkpoint("wf", first.checkpoint_id, step=1)
        await storage.save(second)
        # The newest record as written before the flag (its predecessor's MAC, which its seal
        # holds, is kept as it is), next to one written now.
        for item in (second,):
            raw = await raw_of(storage, item.checkpoint_id)
            old = with_crc(split_sealed(item.checkpoint_id, raw)[1].body)
            await storage.write_raw_body(item.checkpoint_id, resealed(item.checkpoint_id, raw, old))
        async with storage.new_handle() as cold:
            calls: list[int] = []
            real = zlib.crc32

            def counted(data: Any, value: int = 0) -> int:
                calls.append(len(data))
                return real(data, value)

            def counted_checksum(data: Any, seed: int = 0) -> bytes:
                calls.append(len(data))
                return xxhash.xxh3_64_digest(data, seed)

            monkeypatch.setattr(framing, "crc32", counted)
            monkeypatch.setattr(framing, "checksum", counted_checksum)
            assert (await cold.load(second.checkpoint_id)).state == {"step": 1}
            assert [item.state for item in await cold.list_checkpoints(workflow_name="wf")] == [
                {"step": 0},
                {"step": 1},
            ]
            walk = await cold.walk_ancestry(second.checkpoint_id)
            assert [item.checkpoint_id for item in walk.items] == [second.checkpoint_id, first.checkpoint_id]
            assert calls == []  # every MAC held: no CRC or checksum computed after it
            monkeypatch.undo()
            report = await verify(cold)
            assert report.ok, report.findings


async def test_a_bit_flipped_in_a_body_framed_for_a_seal_is_caught_as_tampered(storage_url: str) -> None:
    async with open_storage(storage_url, integrity_key=KEY) as storage:
        item = checkpoint("wf", step=1)
        await storage.save(item)
        checkpoint_id = item.checkpoint_id
        raw = await raw_of(storage, checkpoint_id)
        body_start = len(raw) - len(split_sealed(checkpoint_id, raw)[1].body)
        flags_at = len(raw) - framing.TRAILER_SIZE
        for offset in (flags_at, body_start + 5, len(raw) - 1):
            edited = bytearray(raw)
            edited[offset] ^= 0x04
            await storage.write_raw_body(checkpoint_id, bytes(edited))
            async with storage.new_handle() as reader:
                with pytest.raises(CheckpointTamperedError) as caught:
                    await reader.load(checkpoint_id)
                assert caught.value.kind == TamperKind.MAC_MISMATCH
                report = await verify(reader)
                assert [finding.checkpoint_ids for finding in report.findings] == [(checkpoint_id,)]
        await storage.write_raw_body(checkpoint_id, raw)
        assert (await storage.load(checkpoint_id)).state == {"step": 1}


async def test_an_unsigned_body_in_migration_mode_still_has_its_crc_checked(storage_url: str) -> None:
    async with open_storage(storage_url) as before:
        item = checkpoint("wf", step=1)
        await before.save(item)
        body = bytearray(await raw_of(before, item.checkpoint_id))
        body[5] ^= 0x01
        await before.write_raw_body(item.checkpoint_id, bytes(body))
        async with before.with_integrity_key(IntegrityKeys(KEY, accept_unsigned=True)) as migrating:
            with pytest.raises(CheckpointCorruptedError, match="checksum mismatch"):
                await migrating.load(item.checkpoint_id)
            # Nor does a save chain onto it, as onto a signed record that fails its check.
            with pytest.raises(CheckpointCorruptedError, match="checksum mismatch"):
                await migrating.save(checkpoint("wf", item.checkpoint_id, step=2))


class OldStyleCodec(CheckpointCodec):
    """A codec subclass whose overrides predate ``sealed=``."""

    def encode_checkpoint(self, checkpoint: Any, *, bin_from_bytes_only: bool = False) -> bytes:
        return super().encode_checkpoint(checkpoint, bin_from_bytes_only=bin_from_bytes_only)

    def decode_checkpoint(
        self, body: bytes, *, checkpoint_id: str, nested: Any = None, construct_types: bool = True
    ) -> Any:
        return super().decode_checkpoint(
            body, checkpoint_id=checkpoint_id, nested=nested, construct_types=construct_types
        )


async def test_a_codec_overriding_decode_without_the_keyword_keeps_crc_bodies(tmp_path: Path) -> None:
    # Each storage (a new handle too) and verify decide how to call it, and say so.
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        storage = InMemoryCheckpointStorage(codec=OldStyleCodec(), integrity_key=KEY)
        async with storage:
            item = checkpoint("wf", step=1)
            await storage.save(item)
            body = split_sealed(item.checkpoint_id, await raw_of(storage, item.checkpoint_id))[1].body
            assert not framing.flags_of(body) & framing.FLAG_SEALED
            async with storage.new_handle() as cold:
                assert (await cold.load(item.checkpoint_id)).state == {"step": 1}
            assert (await verify(storage)).ok
    assert len(seen) >= 2
    for warning in seen:
        assert warning.category is DeprecationWarning
        assert "overrides encode_checkpoint, decode_checkpoint without the sealed=" in str(warning.message)
        assert warning.filename == __file__  # the line that built the storage or ran verify


async def test_nested_bodies_are_framed_for_their_seals_too() -> None:
    inner = checkpoint("wf", step="inner")
    outer = checkpoint("wf", step="outer", inner=inner)
    async with InMemoryCheckpointStorage(integrity_key=KEY) as storage:
        await storage.save(outer)
        for checkpoint_id in (outer.checkpoint_id, inner.checkpoint_id):
            body = split_sealed(checkpoint_id, await raw_of(storage, checkpoint_id))[1].body
            assert flags_and_check(body)[0] & framing.FLAG_SEALED
            assert flags_and_check(body)[1] == bytes(8)
        async with storage.new_handle() as cold:
            loaded = await cold.load(outer.checkpoint_id)
            assert loaded.state["inner"].state == {"step": "inner"}
        assert (await verify(storage)).ok


def test_a_compressed_body_and_a_tree_framed_for_their_seals_read_only_as_sealed() -> None:
    pytest.importorskip("zstandard")
    codec = CheckpointCodec(compress_threshold=1)
    item = checkpoint("wf", text="compressible " * 200)
    body = codec.encode_checkpoint(item, sealed=True)
    flags, check = flags_and_check(body)
    assert flags == framing.FLAG_ZSTD | framing.FLAG_SEALED
    assert check == bytes(8)
    assert codec.decode_checkpoint(body, checkpoint_id=item.checkpoint_id, sealed=True) == item
    with pytest.raises(CheckpointCorruptedError, match="without a verified seal"):
        codec.decode_checkpoint(body, checkpoint_id=item.checkpoint_id)
    inner = checkpoint("wf", step="inner")
    outer = checkpoint("wf", inner=inner)
    nodes = CheckpointCodec().encode_checkpoint_tree(outer, sealed=True)
    assert [flags_and_check(node.body) for node in nodes] == [
        (framing.FLAG_SEALED | framing.FLAG_NESTED_REFS, bytes(8)),
        (framing.FLAG_SEALED, bytes(8)),
    ]
    nested = {node.checkpoint.checkpoint_id: node.body for node in nodes[1:]}
    back = CheckpointCodec().decode_checkpoint(
        nodes[0].body, checkpoint_id=outer.checkpoint_id, nested=nested, sealed=True
    )
    assert back.state["inner"] == inner
    # A sealed container whose nested body is not sealed-verified by the caller: refused by name.
    with pytest.raises(CheckpointCorruptedError, match="without a verified seal"):
        CheckpointCodec().decode_checkpoint(
            with_crc(nodes[0].body), checkpoint_id=outer.checkpoint_id, nested=nested
        )


class OldTreeOnly(CheckpointCodec):
    """Only encode_checkpoint_tree is overridden from before ``sealed=``."""

    def encode_checkpoint_tree(self, checkpoint: Any) -> list[EncodedCheckpoint]:
        return super().encode_checkpoint_tree(checkpoint)


class TakesAnyKeyword(CheckpointCodec):
    def decode_checkpoint(self, body: bytes, **options: Any) -> Any:
        return super().decode_checkpoint(body, **options)


def test_how_to_call_a_codec_is_decided_once_when_a_storage_takes_it() -> None:
    plain = CheckpointCodec()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert body_codec(plain) is plain
        takes_any = TakesAnyKeyword()
        assert body_codec(takes_any) is takes_any
    old = OldStyleCodec()
    with pytest.warns(
        DeprecationWarning, match="OldStyleCodec overrides encode_checkpoint, decode_checkpoint"
    ) as seen:
        adapted = body_codec(old)
    assert seen[0].filename == __file__  # the caller's line, not the package's
    assert isinstance(adapted, WithoutSealed)
    assert adapted.codec is old
    item = checkpoint("wf", step=1)
    # Asked for sealed bodies, it writes and reads checksummed ones: the overrides never see the keyword.
    body = adapted.encode_checkpoint(item, sealed=True)
    assert not framing.flags_of(body) & framing.FLAG_SEALED
    assert adapted.decode_checkpoint(body, checkpoint_id=item.checkpoint_id, sealed=True) == item
    framed_for_a_seal = plain.encode_checkpoint(item, sealed=True)
    with pytest.raises(CheckpointCorruptedError, match="without a verified seal"):
        adapted.decode_checkpoint(framed_for_a_seal, checkpoint_id=item.checkpoint_id, sealed=True)
    # One older override is enough: every method drops the keyword, so bodies stay readable by it.
    with pytest.warns(DeprecationWarning, match="overrides encode_checkpoint_tree without"):
        tree_only = body_codec(OldTreeOnly())
    outer = checkpoint("wf", inner=checkpoint("wf", step="inner"))
    assert all(
        not framing.flags_of(node.body) & framing.FLAG_SEALED
        for node in tree_only.encode_checkpoint_tree(outer, sealed=True)
    )
    assert not framing.flags_of(tree_only.encode_checkpoint(item, sealed=True)) & framing.FLAG_SEALED


async def test_a_storage_calls_a_current_codec_with_sealed_and_an_older_one_without() -> None:
    calls: list[tuple[str, bool]] = []

    class Recording(CheckpointCodec):
        def encode_checkpoint(
            self, checkpoint: Any, *, bin_from_bytes_only: bool = False, sealed: bool = False
        ) -> bytes:
            calls.append(("encode", sealed))
            return super().encode_checkpoint(
                checkpoint, bin_from_bytes_only=bin_from_bytes_only, sealed=sealed
            )

        def decode_checkpoint(self, body: bytes, *, sealed: bool = False, **options: Any) -> Any:
            calls.append(("decode", sealed))
            return super().decode_checkpoint(body, sealed=sealed, **options)

    async with InMemoryCheckpointStorage(codec=Recording(), integrity_key=KEY) as storage:
        item = checkpoint("wf", step=1)
        await storage.save(item)
        async with storage.new_handle() as cold:
            assert (await cold.load(item.checkpoint_id)).state == {"step": 1}
    assert calls[0] == ("encode", True)
    assert ("decode", True) in calls
    assert all(sealed for _, sealed in calls)
