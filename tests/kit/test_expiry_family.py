"""The expiry family passes stores whose checkpoints expire after their ttl and catches ones that
never expire, read the ttl in the wrong unit, or let nested records outlive their container."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import ClassVar

import pytest
from rich.console import Console

from conformance import BackendReport, Outcome, StorageTarget, validate
from conformance.tables import backend_report
from storages.backend import CheckpointRecord, InsertResult

from . import support
from .double import DoubleBackend, ExpiringStorage, Row, double_target
from .support import caught_only_by

FAMILY = "expiry"
CLAUSE = "expiry.checkpoints_expire_after_ttl"


def run_family(storage_class: type[ExpiringStorage]) -> BackendReport:
    return support.run_family(FAMILY, double_target(storage_class))


class NeverExpires(ExpiringStorage):
    """Declares a ttl and never applies it."""

    def _expired(self, row: Row, now: float) -> bool:
        return False


class TtlInMilliseconds(ExpiringStorage):
    """Reads the ttl in seconds as milliseconds, so checkpoints vanish almost at once."""

    def _expired(self, row: Row, now: float) -> bool:
        return now >= row.saved_at + self.ttl / 1000


class NestedRecordsNeverExpire(ExpiringStorage):
    """Expires top-level records; the embedded ones saved with them stay forever."""

    def _expired(self, row: Row, now: float) -> bool:
        return not row.record.nested and super()._expired(row, now)


class SeenIdsOutliveTtl(ExpiringStorage):
    """Remembers every id it stored, forever, and takes a save of an expired id for a repeat."""

    seen: ClassVar[dict[str, str]] = {}

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        known = self.seen.get(records[0].checkpoint_id)
        if known is not None:
            return known
        self.seen[records[0].checkpoint_id] = records[0].digest
        return await super().insert(records)


class LongTtl(ExpiringStorage):
    ttl = 3600.0


def test_checkpoints_that_expire_pass() -> None:
    backend = run_family(ExpiringStorage)
    assert backend.result(CLAUSE).outcome is Outcome.PASSED, backend.failures


def test_a_ttl_longer_than_the_kit_waits_is_skipped_and_says_how_to_run_it() -> None:
    result = run_family(LongTtl).result(CLAUSE)
    assert result.outcome is Outcome.SKIPPED
    assert "short ttl" in result.message


@pytest.mark.parametrize(
    ("mutant", "says"),
    [
        (NeverExpires, "still show the checkpoints: load("),
        (TtlInMilliseconds, "before their ttl of 0.6 s"),
        (SeenIdsOutliveTtl, "an index of ids outlived the ttl"),
        (NestedRecordsNeverExpire, "still show the checkpoints: load('embedded-"),
    ],
)
def test_expiry_mutants_are_caught(mutant: type[ExpiringStorage], says: str) -> None:
    caught_only_by(run_family(mutant), CLAUSE, says)


def _with_short_lived_store(expiring: type[ExpiringStorage]) -> StorageTarget:
    """A ttl backend whose own store keeps records an hour, with ``expiring``'s store beside it."""
    short_lived = double_target(expiring)
    return double_target(LongTtl, expiry_factory=short_lived.factory)


def test_the_expiry_family_runs_on_the_targets_short_lived_store() -> None:
    passing = support.run_family(FAMILY, _with_short_lived_store(ExpiringStorage))
    assert passing.result(CLAUSE).outcome is Outcome.PASSED, passing.failures
    broken = support.run_family(FAMILY, _with_short_lived_store(NeverExpires))
    caught_only_by(broken, CLAUSE, "still show the checkpoints")


def render_text(backend: BackendReport) -> str:
    console = Console(width=80, record=True, file=io.StringIO())
    for part in backend_report(backend):
        console.print(part)
    return console.export_text()


def test_the_report_names_what_the_short_lived_store_declares() -> None:
    # The expiry family is judged by what its own store declares: a report that listed only the
    # main store's capabilities could show expiry passed for a store declaring no ttl.
    with_one = support.run_family(
        FAMILY, double_target(DoubleBackend, expiry_factory=double_target(ExpiringStorage).factory)
    )
    assert "ttl" not in with_one.capabilities
    assert with_one.expiry_capabilities is not None
    assert "ttl" in with_one.expiry_capabilities
    assert with_one.to_dict()["expiry_capabilities"] == with_one.expiry_capabilities
    shown = render_text(with_one)
    assert "its expiry store: " in shown
    assert "ttl" in shown.partition("its expiry store: ")[2]
    without = run_family(ExpiringStorage)
    assert without.expiry_capabilities is None
    assert "expiry store" not in render_text(without)


def test_a_ttl_backend_with_a_short_lived_store_passes_the_whole_kit_in_one_run() -> None:
    target = _with_short_lived_store(ExpiringStorage)
    (backend,) = validate(target).backends
    assert not backend.error, backend.error
    assert backend.failures == [], [(r.clause_id, r.message) for r in backend.failures]
    assert backend.result(CLAUSE).outcome is Outcome.PASSED


@pytest.mark.redis
def test_redis_with_a_short_ttl_expires_its_checkpoints() -> None:
    import fakeredis

    from storages.redis import RedisCheckpointStorage

    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    root = RedisCheckpointStorage(client, prefix="kit-expiry", ttl=1)
    backend = support.run_family(FAMILY, StorageTarget(name="redis ttl=1", factory=root.new_handle))
    assert backend.result(CLAUSE).outcome is Outcome.PASSED, backend.failures


@pytest.mark.redis
def test_the_real_redis_server_with_ttl_1_expires_its_checkpoints() -> None:
    import asyncio

    import redis_servers

    from conformance import target_from_url

    prefix = redis_servers.fresh_prefix("kit-expiry")
    url = redis_servers.with_query(redis_servers.redis_url(), prefix=prefix, ttl="1")
    try:
        backend = support.run_family(FAMILY, target_from_url(url))
    finally:
        asyncio.run(redis_servers.wipe(redis_servers.redis_url(), prefix))
    assert backend.result(CLAUSE).outcome is Outcome.PASSED, backend.failures
