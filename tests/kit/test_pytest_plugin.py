"""The pytest entry point: one test item per clause, outcomes mapped onto pytest's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import conformance.clauses  # noqa: F401
from conformance import ClauseResult, Outcome, all_clauses
from conformance.pytest_plugin import report_outcome
from storages.contract import Capability
from storages.memory import MemoryBackend

pytest_plugins = ["pytester"]
# The clause modules are imported above, before any in-process pytester run: each run puts
# sys.modules back as it found it, and a clause module first imported inside one would be gone
# from sys.modules in the next while the registry still runs its functions (a dataclass a clause
# defines then cannot find its module).

MEMORY_SUITE = """
import pytest

from conformance.pytest_plugin import CheckpointStorageConformance
from storages.memory import InMemoryCheckpointStorage


class TestMemory(CheckpointStorageConformance):
{body}
"""

ASYNC_FIXTURE = """
    @pytest.fixture
    async def storage(self):
        storage = InMemoryCheckpointStorage()
        yield storage
        await storage.aclose()
"""

SYNC_FIXTURE = """
    @pytest.fixture
    def storage(self):
        return InMemoryCheckpointStorage()
"""

BROKEN_SUITE = """
import pytest

from conformance.pytest_plugin import CheckpointStorageConformance
from storages.memory import InMemoryCheckpointStorage


class BrokenLoad(InMemoryCheckpointStorage):
    async def load(self, checkpoint_id, **options):
        raise RuntimeError("load is broken on purpose")


class TestBroken(CheckpointStorageConformance):
    clauses = ["contract.save_returns_id", "contract.load_returns_saved"]
{body}

    @pytest.fixture
    def storage(self):
        return {storage}()
"""


def memory_suite(fixture: str, attributes: str = "") -> str:
    return MEMORY_SUITE.format(body=textwrap.indent(textwrap.dedent(attributes), "    ") + fixture)


def broken_suite(storage: str = "BrokenLoad", attributes: str = "") -> str:
    return BROKEN_SUITE.format(storage=storage, body=textwrap.indent(textwrap.dedent(attributes), "    "))


def runnable_on_memory(capabilities: frozenset[object] = MemoryBackend.capabilities) -> int:
    return sum(1 for c in all_clauses() if c.requires <= capabilities and not c.injects)


def auto_mode(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")


def test_each_clause_is_one_item_named_by_its_id(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    pytester.makepyfile(memory_suite(ASYNC_FIXTURE))
    result = pytester.runpytest("-v")
    total = len(all_clauses())
    runnable = runnable_on_memory()
    result.assert_outcomes(passed=runnable, skipped=total - runnable)
    result.stdout.fnmatch_lines(
        [f"*::TestMemory::test_clause[[]{c.id}[]] *" for c in all_clauses()], consecutive=False
    )


def test_strict_mode_runs_clauses_in_the_async_fixture_loop(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n")
    fixture = """
    @pytest_asyncio.fixture
    async def storage(self):
        storage = InMemoryCheckpointStorage()
        yield storage
        await storage.aclose()
"""
    pytester.makepyfile("import pytest_asyncio\n" + memory_suite(fixture))
    result = pytester.runpytest()
    result.assert_outcomes(passed=runnable_on_memory(), skipped=len(all_clauses()) - runnable_on_memory())


def test_runs_without_pytest_asyncio(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(memory_suite(SYNC_FIXTURE))
    result = pytester.runpytest("-p", "no:asyncio")
    result.assert_outcomes(passed=runnable_on_memory(), skipped=len(all_clauses()) - runnable_on_memory())


def test_a_broken_storage_fails_with_the_clause_message(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    pytester.makepyfile(broken_suite())
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_clause[[]contract.load_returns_saved[]]*",
            "*unexpected RuntimeError: load is broken on purpose*",
            # The storage's traceback, down to the line that raised.
            "*Traceback (most recent call last):*",
            "*in load*",
            '*raise RuntimeError("load is broken on purpose")*',
        ],
        consecutive=False,
    )


def test_expected_failure_xfails_when_it_fails(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    pytester.makepyfile(
        broken_suite(attributes='expected_failures = {"contract.load_returns_saved": "load is broken"}\n')
    )
    result = pytester.runpytest("-rx")
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*known deviation (load is broken)*"])


def test_expected_failure_that_passes_fails_strictly(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    pytester.makepyfile(
        broken_suite(
            storage="InMemoryCheckpointStorage",
            attributes='expected_failures = {"contract.load_returns_saved": "stale entry"}\n',
        )
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*remove it from expected_failures*"])


def test_undeclared_capabilities_skip_the_clauses_that_need_them(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    bare = """
    @pytest.fixture
    def storage(self):
        from storages.engine import CheckpointStore
        from storages.memory import MemoryBackend

        class Bare(MemoryBackend):
            capabilities = frozenset()

        return CheckpointStore(Bare())
"""
    pytester.makepyfile(memory_suite(bare))
    result = pytester.runpytest()
    runnable = runnable_on_memory(frozenset())
    assert runnable < len(all_clauses())
    # Without fencing the stale-run race clobbers latest: a runner finding, an xfail in pytest.
    result.assert_outcomes(passed=runnable - 1, skipped=len(all_clauses()) - runnable, xfailed=1)


def test_capabilities_attribute_overrides_the_declared_ones(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    attributes = 'clauses = ["corruption"]\ncapabilities = frozenset()\n'
    pytester.makepyfile(memory_suite(SYNC_FIXTURE, attributes=attributes))
    result = pytester.runpytest()
    corruption = [c for c in all_clauses() if c.family == "corruption"]
    needing = sum(1 for c in corruption if c.requires)
    assert needing > 0
    result.assert_outcomes(passed=len(corruption) - needing, skipped=needing)


def test_command_line_option_narrows_the_clauses(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    pytester.makepyfile(memory_suite(SYNC_FIXTURE))
    result = pytester.runpytest("--conformance-clause", "contract.save_returns_id", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_clause[[]contract.save_returns_id[]] PASSED*"])


def test_family_selection_runs_the_whole_family(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    pytester.makepyfile(memory_suite(SYNC_FIXTURE, attributes='clauses = ["contract"]\n'))
    result = pytester.runpytest()
    result.assert_outcomes(passed=sum(1 for c in all_clauses() if c.family == "contract"))


@pytest.mark.parametrize(
    ("attributes", "named"),
    [
        ('clauses = ["contract.no_such_clause"]\n', "contract.no_such_clause"),
        ('expected_failures = {"nope.never": "typo"}\n', "nope.never"),
    ],
)
def test_unknown_clause_ids_are_a_usage_error(pytester: pytest.Pytester, attributes: str, named: str) -> None:
    auto_mode(pytester)
    pytester.makepyfile(memory_suite(SYNC_FIXTURE, attributes=attributes))
    result = pytester.runpytest()
    assert result.ret != pytest.ExitCode.OK
    assert named in result.stdout.str() + result.stderr.str()


def _result(outcome: Outcome, message: str = "why") -> ClauseResult:
    return ClauseResult(
        "contract.save_returns_id", "contract", "save() returns the id.", outcome, 0.0, message
    )


def test_outcomes_map_onto_pytest_outcomes() -> None:
    report_outcome(_result(Outcome.PASSED, ""))
    failure = r"contract\.save_returns_id: save\(\) returns the id\.\nwhy"
    with pytest.raises(pytest.fail.Exception, match=failure):
        report_outcome(_result(Outcome.FAILED))
    with pytest.raises(pytest.skip.Exception, match="why"):
        report_outcome(_result(Outcome.NOT_APPLICABLE))
    with pytest.raises(pytest.xfail.Exception, match="why"):
        report_outcome(_result(Outcome.XFAILED))
    with pytest.raises(pytest.xfail.Exception, match="runner finding: why"):
        report_outcome(_result(Outcome.FINDING))


def test_importing_the_plugin_has_no_side_effects() -> None:
    probe = (
        "import sys, threading\n"
        "import conformance.pytest_plugin\n"
        "registry = sys.modules['conformance.clause']._REGISTRY\n"
        "assert not registry, sorted(registry)\n"
        "loaded = [m for m in ('conformance.clauses', 'storages.sqlite', 'sqlite3') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
    )
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr


def test_required_capabilities_fail_the_clauses_that_need_them(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    attributes = (
        'clauses = ["nested", "contract"]\ncapabilities = frozenset()\nrequired_capabilities = ["nested"]\n'
    )
    pytester.makepyfile(memory_suite(SYNC_FIXTURE, attributes=attributes))
    result = pytester.runpytest()
    nested = [c for c in all_clauses() if c.family == "nested"]
    needing = sum(1 for c in nested if Capability.NESTED in c.requires)
    assert needing > 0
    contract = sum(1 for c in all_clauses() if c.family == "contract")
    result.assert_outcomes(passed=contract + len(nested) - needing, failed=needing)
    result.stdout.fnmatch_lines(
        ["*needs capability nested, which the run requires but the storage does not declare*"]
    )


def test_an_unknown_required_capability_is_a_clear_failure(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    attributes = 'clauses = ["contract.save_returns_id"]\nrequired_capabilities = ["nestd"]\n'
    pytester.makepyfile(memory_suite(SYNC_FIXTURE, attributes=attributes))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TestMemory.required_capabilities: unknown capability 'nestd'*"])


MAKE_STORAGE = """
    def make_storage(self):
        return InMemoryCheckpointStorage()
"""


@pytest.mark.parametrize("mode", ["strict", "no-asyncio"])
def test_make_storage_needs_no_fixture_in_strict_mode_or_without_pytest_asyncio(
    pytester: pytest.Pytester, mode: str
) -> None:
    pytester.makeini("[pytest]\n")  # pytest-asyncio's default: strict mode
    pytester.makepyfile(memory_suite(MAKE_STORAGE, attributes='clauses = ["contract", "isolation"]\n'))
    result = pytester.runpytest(*(["-p", "no:asyncio"] if mode == "no-asyncio" else []))
    chosen = [c for c in all_clauses() if c.family in ("contract", "isolation")]
    result.assert_outcomes(passed=len(chosen))


def test_a_storage_fixture_from_conftest_still_serves(pytester: pytest.Pytester) -> None:
    # Before make_storage the docs asked for a storage fixture; one defined outside the class
    # (in a conftest) keeps working, async too.
    auto_mode(pytester)
    pytester.makeconftest(
        "import pytest\nfrom storages.memory import InMemoryCheckpointStorage\n\n\n"
        "@pytest.fixture\nasync def storage():\n    async with InMemoryCheckpointStorage() as opened:\n"
        "        yield opened\n"
    )
    pytester.makepyfile(memory_suite("", attributes='clauses = ["contract"]\n'))
    result = pytester.runpytest()
    result.assert_outcomes(passed=sum(1 for c in all_clauses() if c.family == "contract"))


def test_neither_make_storage_nor_a_fixture_says_what_to_define(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    pytester.makepyfile(memory_suite("", attributes='clauses = ["contract.save_returns_id"]\n'))
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'storage' not found*"])


HANGING_SUITE = """
import asyncio

from conformance.pytest_plugin import CheckpointStorageConformance
from storages.memory import InMemoryCheckpointStorage


class HangsOnSave(InMemoryCheckpointStorage):
    async def save(self, checkpoint, **options):
        await asyncio.Event().wait()  # never answers, as a lock a cancelled call left held


class TestHangs(CheckpointStorageConformance):
    clauses = ["contract"]
    operation_timeout = 0.5

    def make_storage(self):
        return HangsOnSave()


class TestHealthyAfterwards(CheckpointStorageConformance):
    clauses = ["contract.save_returns_id"]

    def make_storage(self):
        return InMemoryCheckpointStorage()
"""


def test_a_stuck_storage_stays_stuck_for_the_rest_of_the_session(pytester: pytest.Pytester) -> None:
    """The first clause whose call does not return marks the class's storage stuck; every later
    clause of that class fails at once, saying so, instead of waiting out a bound of its own, and
    another class's storage is not affected."""
    auto_mode(pytester)
    pytester.makepyfile(HANGING_SUITE)
    # -rN: no short summary, whose lines pytest leaves untruncated when CI is set, so each
    # failure's message is counted once whatever the environment.
    result = pytester.runpytest("-p", "no:randomly", "-rN")
    contract = [c for c in all_clauses() if c.family == "contract"]
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1, result.stdout.str()  # the healthy class
    assert outcomes.get("failed") == len(contract), result.stdout.str()
    text = result.stdout.str()
    assert text.count("did not return within 0.5 s") >= 1
    # Every clause after the first stuck one is failed without running, not given its own bound.
    assert text.count("not run: the storage is stuck since") == len(contract) - 1, text


EXPIRING_SUITE = """
import fakeredis
import pytest

from conformance.pytest_plugin import CheckpointStorageConformance
from storages.memory import InMemoryCheckpointStorage
from storages.redis import RedisCheckpointStorage


class TestWithExpiringStore(CheckpointStorageConformance):
    clauses = ["expiry"]

    def make_storage(self):
        return InMemoryCheckpointStorage()

    def make_expiring_storage(self):
        return RedisCheckpointStorage(fakeredis.FakeAsyncRedis(), prefix="expiring", ttl=1)


class TestWithout(CheckpointStorageConformance):
    clauses = ["expiry"]

    def make_storage(self):
        return InMemoryCheckpointStorage()
"""


@pytest.mark.redis
def test_make_expiring_storage_is_where_the_expiry_family_runs(pytester: pytest.Pytester) -> None:
    auto_mode(pytester)
    pytester.makepyfile(EXPIRING_SUITE)
    result = pytester.runpytest("-v", "-rs")
    result.stdout.fnmatch_lines(
        [
            "*TestWithExpiringStore::test_clause?expiry.checkpoints_expire_after_ttl? PASSED*",
            "*TestWithout::test_clause?expiry.checkpoints_expire_after_ttl? SKIPPED*",
        ]
    )
    result.assert_outcomes(passed=1, skipped=1)
