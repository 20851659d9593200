"""LangGraph's own conformance kit (langgraph-checkpoint-conformance, through its ``validate()``)
against StorageSaver on every built-in backend: every base and extended capability must pass.

Parametrised by ``storage_maker``, so each backend's run lands in that backend's tox environment.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from conftest import StorageMaker
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from storages.runners.langgraph import StorageSaver

pytestmark = pytest.mark.langgraph

LANGGRAPH_KIT_TESTS = 81
"""How many tests langgraph-checkpoint-conformance 0.0.2 runs when every capability is detected."""


async def test_langgraph_kit_passes_every_capability(storage_maker: StorageMaker) -> None:
    @checkpointer_test(name="StorageSaver")
    async def saver_over_storage() -> AsyncGenerator[BaseCheckpointSaver[str], None]:
        async with storage_maker() as storage:
            yield StorageSaver(storage)

    report = await validate(saver_over_storage)

    results = report.results
    assert set(results) == {capability.value for capability in ALL_CAPABILITIES}
    assert {name for name, result in results.items() if not result.detected} == set()
    assert {name: result.failures for name, result in results.items() if not result.passed} == {}
    assert sum(result.tests_passed for result in results.values()) == LANGGRAPH_KIT_TESTS
    assert report.passed_all_base()
    assert report.passed_all()
