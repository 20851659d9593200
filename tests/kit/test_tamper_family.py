"""The tamper family passes the in-memory storage and catches storages that sign too little."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from conformance import Outcome, select_clauses, target_from_url
from conformance.clauses.tamper import KIT_KEY
from storages.backend import StoredBody
from storages.contract import Capability
from storages.engine.receipts import PruneReceipts
from storages.engine.sealing import Sealer
from storages.errors import CheckpointCorruptedError
from storages.integrity import IntegrityKeys, Link, Seal, is_sealed, record_mac, split_sealed
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from . import support
from .double import DecodesItself
from .support import caught_only_by, failed

FAMILY = "tamper"


class BodyOnlyMac(Sealer):
    def mac(self, key: bytes, checkpoint_id: str, header: bytes, body: bytes) -> bytes:
        return hmac.new(key, body, hashlib.sha256).digest()


class SignsNoContext(InMemoryCheckpointStorage):
    """MACs the body alone: the key id, chain link, height and id it is stored under are unsigned."""

    sealer_type = BodyOnlyMac


class ChainlessSealer(Sealer):
    async def link(
        self, previous_id: str | None, family: Mapping[str, tuple[bytes, int]]
    ) -> tuple[Link, bytes, int]:
        _, _, height = await super().link(previous_id, family)
        return Link.ABSENT, b"", height


class SignsNoChain(InMemoryCheckpointStorage):
    """Signs every record as the start of a chain: nothing ties it to its predecessor."""

    sealer_type = ChainlessSealer


class CurrentKeySealer(Sealer):
    def verifying_key(self, key_id: str) -> bytes | None:
        return self.provider.signing_key()[1]


class IgnoresKeyIds(InMemoryCheckpointStorage):
    """Checks every record with the current signing key, whatever key id it was signed with."""

    sealer_type = CurrentKeySealer


class AcceptsUnsigned(InMemoryCheckpointStorage):
    """Always in migration mode: a body without a seal is read as if it were signed."""

    def configure_integrity(self, integrity_key: Any) -> None:
        if isinstance(integrity_key, bytes):
            integrity_key = IntegrityKeys(integrity_key)
        if isinstance(integrity_key, IntegrityKeys):
            integrity_key.accept_unsigned = True  # the handle's own keys (the kit makes them per handle)
        super().configure_integrity(integrity_key)


class MacTrustingSealer(Sealer):
    def open(self, stored: StoredBody) -> tuple[StoredBody, Seal | None]:
        if not is_sealed(stored.body):
            return super().open(stored)
        seal, parts = split_sealed(stored.checkpoint_id, stored.body)
        nested = stored.nested
        if nested is not None:
            nested = {key: split_sealed(key, body)[1].body for key, body in nested.items()}
        self.remember({stored.checkpoint_id: (seal.mac, seal.height)})
        return StoredBody(stored.checkpoint_id, parts.body, nested, stored.entry), seal


class TrustsTheSealsMac(InMemoryCheckpointStorage):
    """Reads each record's seal but never recomputes its MAC: any well-formed seal passes."""

    sealer_type = MacTrustingSealer


class AnchorBlindSealer(Sealer):
    async def check_anchor_latest(self, anchor: Any, head: StoredBody | None) -> None:
        return None

    async def check_anchor_head_stored(self, anchor: Any, loaded: StoredBody) -> None:
        return None


class IgnoresAnchors(InMemoryCheckpointStorage):
    """Takes anchor= on get_latest and load, and never checks the store against it."""

    sealer_type = AnchorBlindSealer


class IdlessMac(Sealer):
    def mac(self, key: bytes, checkpoint_id: str, header: bytes, body: bytes) -> bytes:
        return record_mac(key, "", header, body)


class ReadsWhateverBodyIsStored(DecodesItself):
    """MACs a record without the id it is stored under, and decodes a body without checking that
    it belongs to the id, workflow or index entry it was read by: swapped bodies read as valid."""

    sealer_type = IdlessMac


class IgnoresTheIndexEntry(DecodesItself):
    """Checks that a body is the record of its id, but not that it is the record of the workflow
    (or previous id, or signature) the index lists it under."""

    def check(
        self, stored: StoredBody, checkpoint: Any, workflow_name: str | None, signature: str | None
    ) -> None:
        if checkpoint.checkpoint_id != stored.checkpoint_id:
            raise CheckpointCorruptedError(
                stored.checkpoint_id, "the stored body belongs to another checkpoint"
            )


class TrustingReceipts(PruneReceipts):
    async def check_prune_receipt(self, pruned_id: str, signed_after: bytes) -> None:
        return None


class TrustsBareTombstones(InMemoryCheckpointStorage):
    """Takes every tombstone for a prune of its own: a deletion dressed as a prune passes."""

    receipts_type = TrustingReceipts


class WritesNoReceipts(InMemoryCheckpointStorage):
    """Prunes without signing receipts: its own prunes then look forged."""

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        return await self.backend.prune(workflow_name, keep_last)


def keyed(storage_class: type[Any]) -> Any:
    """A factory of handles with the kit's key: a keyed handle declares the integrity capability."""

    def factory() -> Any:
        storage = storage_class()
        storage.configure_integrity(KIT_KEY)
        return storage

    factory.__name__ = storage_class.__name__
    return factory


def test_in_memory_storage_passes_every_tamper_clause() -> None:
    backend = support.run_family(FAMILY, keyed(InMemoryCheckpointStorage))
    assert not backend.failures, [(r.clause_id, r.message) for r in backend.failures]
    assert {r.outcome for r in backend.results} == {Outcome.PASSED}
    assert len(backend.results) == len(select_clauses([FAMILY])) == 12


def test_a_mac_over_the_body_alone_is_caught_by_the_cross_context_replay() -> None:
    backend = support.run_family(FAMILY, keyed(SignsNoContext))
    caught_only_by(backend, "tamper.cross_context_replay", "moved to another chain position")


def test_records_signed_without_their_chain_link_are_caught() -> None:
    backend = support.run_family(FAMILY, keyed(SignsNoChain))
    # A walk then cannot tell a deletion (bare, or behind a forged tombstone) from a chain's
    # start, and an anchor cannot be followed forward to a later save.
    assert failed(backend) == {
        "tamper.middle_deletion",
        "tamper.forged_prune",
        "tamper.unedited_store_verifies",
    }
    assert "as signed after the deleted" in backend.result("tamper.middle_deletion").message
    assert "rolled_back" in backend.result("tamper.unedited_store_verifies").message


def test_verifying_without_the_key_id_is_caught_by_the_rotation_clause() -> None:
    backend = support.run_family(FAMILY, keyed(IgnoresKeyIds))
    caught_only_by(backend, "tamper.key_rotation", "is refused after a rotation")


def test_reading_unsigned_records_is_caught_by_the_forged_insert_clause() -> None:
    backend = support.run_family(FAMILY, keyed(AcceptsUnsigned))
    caught_only_by(backend, "tamper.forged_insert", "expected CheckpointTamperedError")


def test_the_family_keys_its_own_handles_and_needs_raw_access() -> None:
    keyless = support.run_family(FAMILY, InMemoryCheckpointStorage)
    assert {r.outcome for r in keyless.results} == {Outcome.PASSED}
    without_raw_access = MemoryBackend.capabilities - {Capability.RAW_ACCESS}
    undeclared = support.run_family(FAMILY, InMemoryCheckpointStorage, capabilities=without_raw_access)
    assert {r.outcome for r in undeclared.results} == {Outcome.SKIPPED}


class OffersNoKeys(InMemoryCheckpointStorage):
    """Exposes its bytes but cannot sign: a store any writer can change unseen."""

    with_integrity_key = None  # type: ignore[assignment]


def test_a_storage_that_cannot_be_keyed_fails_every_clause() -> None:
    backend = support.run_family(FAMILY, OffersNoKeys)
    assert failed(backend) == {c.id for c in select_clauses([FAMILY])}
    assert all("offers no integrity keys" in r.message for r in backend.results)


@pytest.mark.sqlite
def test_a_sqlite_url_with_a_key_passes_every_tamper_clause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIT_TAMPER_KEY", KIT_KEY.hex())
    target = target_from_url(f"sqlite:///{tmp_path}/kit.db?integrity_key_env=KIT_TAMPER_KEY")
    backend = support.run_family(FAMILY, target)
    assert {r.outcome for r in backend.results} == {Outcome.PASSED}, [r.message for r in backend.failures]


def test_a_seal_whose_mac_is_never_checked_is_caught_by_every_edit_of_signed_bytes() -> None:
    backend = support.run_family(FAMILY, keyed(TrustsTheSealsMac))
    assert failed(backend) == {
        "tamper.content_edit",
        "tamper.cross_context_replay",
        "tamper.forged_insert",
        "tamper.forged_prune",  # a receipt signed with an untrusted key passes too
        "tamper.key_rotation",
    }
    assert "load returned checkpoint" in backend.result("tamper.content_edit").message


def test_an_anchor_that_is_never_checked_is_caught_by_every_rollback() -> None:
    backend = support.run_family(FAMILY, keyed(IgnoresAnchors))
    assert failed(backend) == {
        "tamper.tail_truncation",
        "tamper.rollback_replay",
        "tamper.snapshot_rollback",
    }
    assert "get_latest(anchor=) returned checkpoint" in backend.result("tamper.tail_truncation").message


def test_reading_a_swapped_body_as_valid_is_caught_by_the_reorder_clause() -> None:
    backend = support.run_family(FAMILY, keyed(ReadsWhateverBodyIsStored))
    # A body moved from another workflow reads as valid too; a moved MAC still does not.
    assert failed(backend) == {"tamper.reorder", "tamper.metadata_edit", "tamper.cross_context_replay"}
    assert "load returned checkpoint" in backend.result("tamper.reorder").message


def test_reading_a_body_listed_under_another_workflow_is_caught_by_the_metadata_clause() -> None:
    backend = support.run_family(FAMILY, keyed(IgnoresTheIndexEntry))
    caught_only_by(backend, "tamper.metadata_edit", "returned checkpoint")


def test_trusting_a_bare_tombstone_is_caught_by_the_forged_prune_clause() -> None:
    backend = support.run_family(FAMILY, keyed(TrustsBareTombstones))
    caught_only_by(backend, "tamper.forged_prune", "after a prune without the key, the walk")


def test_a_prune_that_signs_no_receipts_is_caught_by_the_forged_prune_control() -> None:
    backend = support.run_family(FAMILY, keyed(WritesNoReceipts))
    caught_only_by(backend, "tamper.forged_prune", "after a prune with the key, the walk")


# ------------------------------------------------------------------ under a TTL
# A record's absence is what expiry leaves, so on a storage with a TTL the deletion clauses check
# the walks and not verify's report (docs/integrity.md, "Under a TTL"); every other edit is still
# refused, and the mutants whose walks trust what the key cannot vouch for are still caught.

WITH_TTL = MemoryBackend.capabilities | {Capability.TTL}


@pytest.mark.redis
def test_a_redis_url_with_a_ttl_and_a_key_passes_every_tamper_clause(monkeypatch: pytest.MonkeyPatch) -> None:
    import redis_servers

    monkeypatch.setenv("KIT_TAMPER_KEY", KIT_KEY.hex())
    url = redis_servers.with_query(
        redis_servers.redis_url(),
        prefix=redis_servers.fresh_prefix("tamper-ttl"),
        ttl="600",  # the keys clean themselves up
        integrity_key_env="KIT_TAMPER_KEY",
    )
    backend = support.run_family(FAMILY, target_from_url(url))
    assert {r.outcome for r in backend.results} == {Outcome.PASSED}, [r.message for r in backend.failures]


def test_under_a_ttl_the_deletion_clauses_check_walks_not_verify() -> None:
    backend = support.run_family(FAMILY, keyed(InMemoryCheckpointStorage), capabilities=WITH_TTL)
    assert {r.outcome for r in backend.results} == {Outcome.PASSED}, [r.message for r in backend.failures]
    # Verify of this (TTL-less) store would report the deletions; the TTL target does not ask it.
    without_ttl = support.run_family(FAMILY, keyed(SignsNoChain))
    assert "as signed after the deleted" in without_ttl.result("tamper.middle_deletion").message


def test_under_a_ttl_trusting_a_bare_tombstone_is_still_caught() -> None:
    backend = support.run_family(FAMILY, keyed(TrustsBareTombstones), capabilities=WITH_TTL)
    caught_only_by(backend, "tamper.forged_prune", "after a prune without the key, the walk")


def test_under_a_ttl_records_signed_without_their_chain_link_are_still_caught() -> None:
    backend = support.run_family(FAMILY, keyed(SignsNoChain), capabilities=WITH_TTL)
    # Only the walks are asked: a chain restart ends at a tombstone as pruned, and an anchor
    # cannot be followed forward; a bare deletion ends the index walk missing either way.
    assert failed(backend) == {"tamper.forged_prune", "tamper.unedited_store_verifies"}


class ExpiresEveryReceipt(InMemoryCheckpointStorage):
    """Declares a TTL and tells verify that no receipt is ever stored: verify then excuses every
    tombstone, even one whose receipt is there and signed with a key this storage does not trust."""

    capabilities = MemoryBackend.capabilities | {Capability.TTL}
    ttl = 3600.0

    async def prune_receipt_stored(self, pruned_id: str, signed_after: bytes) -> bool:
        return False


def test_under_a_ttl_a_stored_receipt_that_does_not_vouch_is_still_reported() -> None:
    honest = support.run_family(FAMILY, keyed(_WithTTL))
    assert {r.outcome for r in honest.results} == {Outcome.PASSED}, [r.message for r in honest.failures]
    backend = support.run_family(FAMILY, keyed(ExpiresEveryReceipt))
    caught_only_by(
        backend, "tamper.forged_prune", "after a prune with an untrusted key, verify did not report"
    )


class _WithTTL(InMemoryCheckpointStorage):
    """The in-memory storage declaring a TTL (none configured: nothing expires), so verify and
    the kit both treat it as a storage whose records may expire."""

    capabilities = MemoryBackend.capabilities | {Capability.TTL}
    ttl = 3600.0
