"""Integrity keys, sealed bodies, anchors, migration and key secrecy, on the URL-reachable backends
(tests/test_tamper_harness.py applies the nine edits on every backend)."""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
from pathlib import Path

import pytest

from storages import (
    CheckpointCorruptedError,
    CheckpointTamperedError,
    InMemoryCheckpointStorage,
    IntegrityKeys,
    InvalidCheckpointError,
    StorageConfigurationError,
    WorkflowCheckpoint,
    open_storage,
)
from storages.contract import AncestryEnd
from storages.integrity import is_sealed
from storages.integrity_keys import key_id_of
from storages.tools.cli.main import main

KEY = b"integrity-test-key-0123456789abc"
ROTATED = b"integrity-test-key-rotated-98765"


def checkpoint(workflow: str, previous: str | None = None, **state: object) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=workflow, graph_signature_hash="sig", previous_checkpoint_id=previous, state=dict(state)
    )


async def save_chain(storage: object, workflow: str, length: int) -> list[str]:
    ids: list[str] = []
    previous: str | None = None
    for step in range(length):
        item = checkpoint(workflow, previous, step=step)
        await storage.save(item)  # type: ignore[attr-defined]
        ids.append(item.checkpoint_id)
        previous = item.checkpoint_id
    return ids


def keyed_url(url: str, monkeypatch: pytest.MonkeyPatch, value: str | None = None) -> str:
    monkeypatch.setenv("CKPT_TEST_KEY", KEY.hex() if value is None else value)
    return url + ("&" if "?" in url else "?") + "integrity_key_env=CKPT_TEST_KEY"


# ---------------------------------------------------------------------- keys and their secrecy


def test_keys_are_checked_and_never_shown() -> None:
    with pytest.raises(StorageConfigurationError, match="at least 16"):
        IntegrityKeys(b"short")
    with pytest.raises(StorageConfigurationError, match="must be bytes"):
        IntegrityKeys("a text key")  # type: ignore[arg-type]
    keys = IntegrityKeys(ROTATED, verifying_keys=[KEY])
    assert keys.signing_key() == (key_id_of(ROTATED), ROTATED)
    assert keys.verifying_key(key_id_of(KEY)) == KEY
    assert keys.verifying_key("nope") is None
    for text in (repr(keys), str(keys), repr(InMemoryCheckpointStorage(integrity_key=keys))):
        assert KEY.hex() not in text
        assert ROTATED.hex() not in text
        assert "integrity-test" not in text


async def test_a_url_names_the_variable_never_the_key(
    storage_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = keyed_url(storage_url, monkeypatch)
    async with open_storage(url) as storage:
        assert storage.integrity_enabled
        assert storage.new_handle().integrity_enabled
        ids = await save_chain(storage, "wf", 2)
        assert is_sealed(await storage.read_raw_body(ids[0]) or b"")
        assert KEY.hex() not in repr(storage)
        assert KEY.hex() not in storage.describe()
        monkeypatch.setenv("CKPT_B64", "base64:" + base64.b64encode(KEY).decode())
        again = open_storage(
            storage_url + ("&" if "?" in storage_url else "?") + "integrity_key_env=CKPT_B64"
        )
        same_key = storage.with_integrity_key(again.integrity_keys)  # memory:// opens a new store per URL
        assert (await same_key.load(ids[1])).state == {"step": 1}  # the same key, written as base64
        await same_key.aclose()
    with pytest.raises(StorageConfigurationError, match="not both"):
        open_storage(url, integrity_key=KEY)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("not hex at all", "does not hold a key"),
        ("abcd", "at least 16"),
        ("base64:!!", "does not hold a key"),
    ],
)
def test_a_bad_key_in_the_environment_is_refused_without_quoting_it(
    monkeypatch: pytest.MonkeyPatch, value: str, says: str
) -> None:
    with pytest.raises(StorageConfigurationError, match=says) as caught:
        open_storage(keyed_url("memory://", monkeypatch, value))
    assert value not in str(caught.value)


def test_an_unset_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CKPT_UNSET", raising=False)
    with pytest.raises(StorageConfigurationError, match="'CKPT_UNSET' is not set"):
        open_storage("memory://?integrity_key_env=CKPT_UNSET")


# ---------------------------------------------------------------------- reads, chains, anchors


async def test_a_chain_continued_on_a_cold_handle_still_verifies(storage_url: str) -> None:
    async with open_storage(storage_url, integrity_key=KEY) as first:
        ids = await save_chain(first, "wf", 2)
        second = first.new_handle()  # remembers no MAC
    async with second:
        item = checkpoint("wf", ids[-1], step=2)
        await second.save(item)
        assert await second.save(item) == item.checkpoint_id  # an idempotent re-save stays a no-op
        walk = await second.walk_ancestry(item.checkpoint_id)
        assert walk.end is AncestryEnd.ROOT
        assert len(walk.items) == 3


async def test_a_pruned_ancestor_is_not_tampering(storage_url: str) -> None:
    async with open_storage(storage_url, integrity_key=KEY) as storage:
        ids = await save_chain(storage, "wf", 3)
        assert await storage.prune(workflow_name="wf", keep_last=1) == 2
        walk = await storage.walk_ancestry(ids[-1])
        assert walk.end is AncestryEnd.PRUNED


async def test_a_prune_receipt_is_checked_only_with_a_key() -> None:
    async with InMemoryCheckpointStorage() as keyless:
        with pytest.raises(StorageConfigurationError, match="check_prune_receipt needs an integrity key"):
            await keyless.check_prune_receipt("cp", bytes(32))
    async with InMemoryCheckpointStorage(integrity_key=KEY) as keyed:
        with pytest.raises(CheckpointTamperedError, match="unreceipted_tombstone") as caught:
            await keyed.check_prune_receipt("cp", bytes(32))
        assert caught.value.checkpoint_id == "cp"
        assert KEY.hex() not in str(caught.value)


async def test_an_anchor_follows_later_saves_and_refuses_misuse(storage_url: str) -> None:
    async with open_storage(storage_url, integrity_key=KEY) as storage:
        empty = await storage.head_anchor(workflow_name="wf")
        assert await storage.get_latest(workflow_name="wf", anchor=empty) is None
        ids = await save_chain(storage, "wf", 2)
        anchor = await storage.head_anchor(workflow_name="wf")
        more = await save_chain(storage, "other", 1)
        await storage.save(checkpoint("wf", ids[-1], step=2))
        async with storage.new_handle() as cold:
            latest = await cold.get_latest(workflow_name="wf", anchor=anchor)
        assert latest is not None
        assert latest.previous_checkpoint_id == ids[-1]
        with pytest.raises(InvalidCheckpointError, match="not 'other'"):
            await storage.get_latest(workflow_name="other", anchor=anchor)
        with pytest.raises(InvalidCheckpointError, match="altered"):
            await storage.get_latest(
                workflow_name="wf", anchor=anchor[:-3] + ("AAA" if anchor[-3:] != "AAA" else "BBB")
            )
        with pytest.raises(InvalidCheckpointError, match="head_anchor"):
            await storage.load(more[0], anchor="not a token")
        async with storage.with_integrity_key(ROTATED) as stranger:
            with pytest.raises(InvalidCheckpointError, match="no key for"):
                await stranger.get_latest(workflow_name="wf", anchor=anchor)
        async with storage.with_integrity_key(None) as unkeyed:
            with pytest.raises(StorageConfigurationError, match="needs an integrity key"):
                await unkeyed.get_latest(workflow_name="wf", anchor=anchor)


async def test_a_keyless_handle_never_reads_signed_bodies_as_plain(storage_url: str) -> None:
    async with open_storage(storage_url, integrity_key=KEY) as storage:
        (saved,) = await save_chain(storage, "wf", 1)
        async with storage.with_integrity_key(None) as keyless:
            with pytest.raises(CheckpointCorruptedError):
                await keyless.load(saved)


async def test_migration_mode_reads_old_unsigned_records_and_signs_new_ones(storage_url: str) -> None:
    async with open_storage(storage_url) as before:
        (old,) = await save_chain(before, "wf", 1)
        async with before.with_integrity_key(KEY) as strict:
            error = await _refusal(strict.load(old))
            assert error.kind == "unsigned"
            assert "accept_unsigned" in str(error)
        storage = before.with_integrity_key(IntegrityKeys(KEY, accept_unsigned=True))
    async with storage:
        assert (await storage.load(old)).state == {"step": 0}
        new = checkpoint("wf", old, step=1)
        await storage.save(new)
        assert is_sealed(await storage.read_raw_body(new.checkpoint_id) or b"")
        assert (await storage.walk_ancestry(new.checkpoint_id)).end is AncestryEnd.ROOT


async def _refusal(read: object) -> CheckpointTamperedError:
    with pytest.raises(CheckpointTamperedError) as caught:
        await read  # type: ignore[misc]
    return caught.value


def test_the_error_names_the_id_and_the_kind_and_survives_pickling() -> None:
    error = CheckpointTamperedError("cp-1", "mac_mismatch", "its body is not what was signed")
    assert isinstance(error, CheckpointCorruptedError)
    assert "'cp-1'" in str(error)
    assert "mac_mismatch" in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert (again.checkpoint_id, again.kind, str(again)) == ("cp-1", "mac_mismatch", str(error))


# ---------------------------------------------------------------------- the CLI


@pytest.mark.sqlite
def test_verify_reports_a_rollback_given_an_anchor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = keyed_url(f"sqlite:///{tmp_path}/t.db", monkeypatch)

    async def prepare() -> str:
        async with open_storage(url) as storage:
            ids = await save_chain(storage, "wf", 2)
            anchor = await storage.head_anchor(workflow_name="wf")
            await storage.delete(ids[-1])
            return anchor

    anchor = asyncio.run(prepare())
    assert main(["verify", url, "--anchor", f"wf={anchor}", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["rolled_back"] == 1
    assert report["findings"][0]["workflow_name"] == "wf"
    assert main(["verify", url, "--json"]) == 0  # without the anchor, what is left is authentic
    capsys.readouterr()
    assert main(["verify", url, "--anchor", "no-equals-sign"]) == 2
    assert KEY.hex() not in capsys.readouterr().err


@pytest.mark.redis
async def test_under_a_ttl_an_expired_ancestor_is_not_reported_as_a_deletion() -> None:
    import fakeredis
    from redis_servers import fresh_prefix

    from storages.redis import RedisCheckpointStorage
    from storages.tools.verify import FindingKind, verify

    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    prefix = fresh_prefix("ttl")
    expiring = RedisCheckpointStorage(client, prefix=prefix, ttl=3600, integrity_key=KEY)
    lasting = RedisCheckpointStorage(client, prefix=prefix, integrity_key=KEY)
    try:
        ids = await save_chain(expiring, "wf", 3)
        assert await expiring.delete(ids[0])  # what expiry leaves: the oldest record gone, no tombstone
        assert not (await verify(expiring)).of_kind(FindingKind.CHAIN_BROKEN)
        assert (await verify(lasting)).of_kind(FindingKind.CHAIN_BROKEN)  # without a TTL: reported
    finally:
        await expiring.aclose()
        await lasting.aclose()
        await client.aclose()


async def test_a_backend_s_own_new_handle_keeps_the_key() -> None:
    # DictBackend.new_handle() lists what the backend needs (its tables); the keys are the
    # engine's, carried to every handle whatever the backend does.
    from examples.dict_storage import DictCheckpointStorage

    keyed = DictCheckpointStorage(integrity_key=KEY)
    assert keyed.new_handle().integrity_enabled
    assert keyed.new_handle().new_handle().integrity_enabled
    assert not keyed.with_integrity_key(None).new_handle().integrity_enabled
    async with keyed:
        with pytest.raises(StorageConfigurationError, match="before first use"):
            keyed.configure_integrity(None)


@pytest.mark.parametrize("key", [KEY, b"k" * 64, b"a key longer than one SHA-256 block " * 3])
def test_record_macs_are_standard_hmac_sha256(key: bytes) -> None:
    import hmac

    from storages.integrity import Link, record_mac, seal_header

    header = seal_header("id", Link.ROOT, b"", 0, None, 0, None)
    message = b"checkpoint-storages/record/v1\x00" + b"\x00\x04cp-1" + header + b"body"
    assert record_mac(key, "cp-1", header, b"body") == hmac.digest(key, message, "sha256")


@pytest.mark.parametrize(
    ("link_kind", "link", "container_id", "position", "previous_id"),
    [
        ("ROOT", b"", None, 0, None),
        ("PRESENT", bytes(range(32)), None, 0, "cp-0"),
        ("ABSENT", b"", "container-1", 3, "cp-0"),
        ("PRESENT", b"\xff" * 32, "container-\u00e9", 7, "pr\u00e9vious"),
    ],
)
def test_seal_record_is_the_header_the_mac_and_the_body_joined(
    link_kind: str, link: bytes, container_id: str | None, position: int, previous_id: str | None
) -> None:
    from storages.integrity import Link, parse_seal, record_mac, seal_header, seal_record

    kind = Link[link_kind]
    header = seal_header("key-1", kind, link, 12, container_id, position, previous_id)
    mac = record_mac(KEY, "cp-1", header, b"body")
    assert seal_record(
        "key-1", KEY, "cp-1", kind, link, 12, container_id, position, previous_id, b"body"
    ) == (
        header + mac + b"body",
        mac,
    )
    seal, header_end, body_start = parse_seal("cp-1", header + mac + b"body")
    assert (header_end, body_start, seal.mac, seal.container_id, seal.previous_id) == (
        len(header),
        len(header) + 32,
        mac,
        container_id,
        previous_id,
    )


def test_per_key_hmac_states_are_bounded_and_stay_right() -> None:
    import hmac

    from storages import integrity

    keys = [bytes([index]) * 32 for index in range(integrity._KEY_STATES_LIMIT + 8)]
    header = integrity.seal_header("id", integrity.Link.ROOT, b"", 0, None, 0, None)
    message = b"checkpoint-storages/record/v1\x00" + b"\x00\x04cp-1" + header + b"body"
    for _ in range(2):  # the second pass finds the early keys evicted and hashes them anew
        for key in keys:
            assert integrity.record_mac(key, "cp-1", header, b"body") == hmac.digest(key, message, "sha256")
            assert len(integrity._KEY_STATES) <= integrity._KEY_STATES_LIMIT


async def test_a_cold_handle_will_not_chain_onto_a_predecessor_that_fails(storage_url: str) -> None:
    async with open_storage(storage_url, integrity_key=KEY) as storage:
        (first,) = await save_chain(storage, "wf", 1)
        raw = await storage.read_raw_body(first) or b""
        await storage.write_raw_body(first, raw[:-1] + bytes([raw[-1] ^ 1]))
        async with storage.new_handle() as cold:
            error = await _refusal(cold.save(checkpoint("wf", first, step=1)))
        assert error.checkpoint_id == first
        assert error.kind == "mac_mismatch"


async def test_pending_writes_are_signed_and_an_edited_batch_is_refused() -> None:
    from storages.contract import PendingWrite
    from storages.engine import writes_log_name

    async with InMemoryCheckpointStorage(integrity_key=KEY) as storage:
        (owner,) = await save_chain(storage, "wf", 1)
        await storage.put_writes(owner, [PendingWrite("task", 0, "approval", "no")], workflow_name="wf")
        assert [w.value for w in await storage.list_writes(owner, workflow_name="wf")] == ["no"]
        (batch_id,) = await storage.backend.list_ids(writes_log_name("wf"), owner)
        stored = await storage.backend.load(batch_id)  # an internal log id: the backend's own read
        raw = b"" if stored is None else stored.body
        assert is_sealed(raw)
        edited = raw.replace(b"no", b"ok")
        assert edited != raw
        await storage.backend.overwrite_body(batch_id, edited, "")
        with pytest.raises(CheckpointTamperedError) as caught:
            await storage.list_writes(owner, workflow_name="wf")
        assert caught.value.checkpoint_id == batch_id


# ---------------------------------------------------------------------- rereading held bytes


class SwitchableKeys:
    """A key provider whose verifying key for the signing key id can be changed or withdrawn."""

    def __init__(self, key: bytes) -> None:
        self.key_id = key_id_of(key)
        self.signing = key
        self.verifying: bytes | None = key

    def signing_key(self) -> tuple[str, bytes]:
        return self.key_id, self.signing

    def verifying_key(self, key_id: str) -> bytes | None:
        return self.verifying if key_id == self.key_id else None


async def test_bytes_edited_after_a_verified_read_are_refused_on_the_next_read() -> None:
    async with InMemoryCheckpointStorage(integrity_key=KEY) as storage:
        (first,) = await save_chain(storage, "wf", 1)
        await storage.load(first)
        raw = await storage.read_raw_body(first) or b""
        async with storage.with_integrity_key(None) as attacker:
            await attacker.write_raw_body(first, raw[:-1] + bytes([raw[-1] ^ 1]))
        error = await _refusal(storage.load(first))
        assert (error.checkpoint_id, error.kind) == (first, "mac_mismatch")
        # The same bytes written back as a new object (equal, not identical) verify again.
        async with storage.with_integrity_key(None) as attacker:
            await attacker.write_raw_body(first, bytes(bytearray(raw)))
        assert (await storage.load(first)).state == {"step": 0}


async def test_a_withdrawn_or_changed_key_is_checked_again_on_a_reread() -> None:
    keys = SwitchableKeys(KEY)
    async with InMemoryCheckpointStorage(integrity_key=keys) as storage:
        (first,) = await save_chain(storage, "wf", 1)
        await storage.load(first)
        keys.verifying = None
        error = await _refusal(storage.load(first))
        assert (error.checkpoint_id, error.kind) == (first, "unknown_key")
        keys.verifying = ROTATED  # the key id now names another key: the old MAC does not hold
        error = await _refusal(storage.load(first))
        assert (error.checkpoint_id, error.kind) == (first, "mac_mismatch")
        keys.verifying = KEY
        assert (await storage.load(first)).state == {"step": 0}
