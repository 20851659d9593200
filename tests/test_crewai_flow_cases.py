"""CrewAI's own flow persistence cases, run with StorageFlowPersistence on every built-in backend.

Ported as our own tests (crewai's wheel ships no tests; its repository's code is reference only):
each test names the upstream case it mirrors, in crewAIInc/crewAI ``lib/crewai/tests/``
``test_flow_persistence.py`` and ``test_async_human_feedback.py``, and asserts what that case
asserts, with ``SQLiteFlowPersistence(db_path)`` replaced by ``StorageFlowPersistence`` over the
backend's store. Cases of those files that test no persistence (context serialization, providers,
console output) are not ported; docs/runner-profiles.md lists every case and its outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

import pytest
import runner_env  # noqa: F401 - before crewai
from conftest import StorageMaker
from crewai.flow.async_feedback import HumanFeedbackPending, PendingFeedbackContext
from crewai.flow.flow import Flow, FlowState, listen, start
from crewai.flow.human_feedback import human_feedback
from crewai.flow.persistence import persist
from pydantic import BaseModel, Field

from storages.runners.crewai import StorageFlowPersistence

pytestmark = pytest.mark.crewai


class CounterState(FlowState):
    counter: int = 0
    message: str = ""


@pytest.fixture
def persistence(storage_maker: StorageMaker) -> Iterator[StorageFlowPersistence]:
    adapter = StorageFlowPersistence(storage_maker())
    try:
        yield adapter
    finally:
        adapter.close()


def _context(flow_id: str, method_name: str = "review", **fields: Any) -> PendingFeedbackContext:
    return PendingFeedbackContext(
        flow_id=flow_id,
        flow_class="test.TestFlow",
        method_name=method_name,
        method_output=fields.pop("method_output", "content"),
        message=fields.pop("message", "Review:"),
        **fields,
    )


# ---------------------------------------------------------------------- test_flow_persistence.py


def test_persist_decorator_saves_state(persistence: StorageFlowPersistence) -> None:
    """Mirrors test_persist_decorator_saves_state."""

    class DictFlow(Flow[dict[str, str]]):
        initial_state = dict()  # noqa: RUF012 - as upstream

        @start()
        @persist(persistence)
        def init_step(self) -> None:
            self.state["message"] = "Hello, World!"
            self.state["id"] = "test-uuid"

    flow = DictFlow(persistence=persistence)
    flow.kickoff()
    saved = persistence.load_state(flow.state["id"])
    assert saved is not None
    assert saved["message"] == "Hello, World!"


def test_structured_state_persistence(persistence: StorageFlowPersistence) -> None:
    """Mirrors test_structured_state_persistence."""

    class StructuredFlow(Flow[CounterState]):
        initial_state = CounterState

        @start()
        @persist(persistence)
        def count_up(self) -> None:
            self.state.counter += 1
            self.state.message = f"Count is {self.state.counter}"

    flow = StructuredFlow(persistence=persistence)
    flow.kickoff()
    saved = persistence.load_state(flow.state.id)
    assert saved is not None
    assert saved["counter"] == 1
    assert saved["message"] == "Count is 1"


def test_flow_state_restoration(persistence: StorageFlowPersistence) -> None:
    """Mirrors test_flow_state_restoration."""

    class RestorableFlow(Flow[CounterState]):
        @start()
        @persist(persistence)
        def set_message(self) -> None:
            if self.state.message == "":
                self.state.message = "Original message"
            if self.state.counter == 0:
                self.state.counter = 42

    first = RestorableFlow(persistence=persistence)
    first.kickoff()
    original = first.state.id

    second = RestorableFlow(persistence=persistence)
    second.kickoff(inputs={"id": original, "counter": 43})
    assert second.state.id == original
    assert second.state.message == "Original message"
    assert second.state.counter == 43

    third = RestorableFlow(persistence=persistence)
    third.kickoff(inputs={"id": original, "message": "Updated message"})
    assert third.state.id == original
    assert third.state.counter == 43
    assert third.state.message == "Updated message"


def test_multiple_method_persistence(persistence: StorageFlowPersistence) -> None:
    """Mirrors test_multiple_method_persistence (both flows)."""

    def steps(persist_second: bool) -> type[Flow[CounterState]]:
        class MultiStepFlow(Flow[CounterState]):
            @start()
            @persist(persistence)
            def step_1(self) -> None:
                if self.state.counter == 1:
                    self.state.counter, self.state.message = 99999, "Step 99999"
                else:
                    self.state.counter, self.state.message = 1, "Step 1"

            def second(self) -> None:
                if self.state.counter == 1:
                    self.state.counter, self.state.message = 2, "Step 2"

            step_2 = listen(step_1)(persist(persistence)(second) if persist_second else second)

        return MultiStepFlow

    persisted = steps(persist_second=True)
    flow = persisted(persistence=persistence)
    flow.kickoff()
    again = persisted(persistence=persistence)
    again.kickoff(inputs={"id": flow.state.id})
    assert (again.state.counter, again.state.message) == (2, "Step 2")

    unpersisted = steps(persist_second=False)
    flow = unpersisted(persistence=persistence)
    flow.kickoff()
    again = unpersisted(persistence=persistence)
    again.kickoff(inputs={"id": flow.state.id})
    assert (again.state.counter, again.state.message) == (99999, "Step 99999")


def test_persist_decorator_verbose_logging(
    persistence: StorageFlowPersistence, caplog: pytest.LogCaptureFixture
) -> None:
    """Mirrors test_persist_decorator_verbose_logging."""
    caplog.set_level("INFO")

    def flow_class(flow_id: str, verbose: bool) -> type[Flow[dict[str, str]]]:
        class LoggedFlow(Flow[dict[str, str]]):
            initial_state = dict()  # noqa: RUF012 - as upstream

            @start()
            @persist(persistence, verbose=verbose)
            def init_step(self) -> None:
                self.state["message"] = "Hello, World!"
                self.state["id"] = flow_id

        return LoggedFlow

    flow_class("test-uuid-1", verbose=False)(persistence=persistence).kickoff()
    assert "Saving flow state" not in caplog.text
    caplog.clear()
    flow_class("test-uuid-2", verbose=True)(persistence=persistence).kickoff()
    assert "Saving flow state" in caplog.text


class Message(BaseModel):
    role: str
    type: str
    content: str


class HistoryState(FlowState):
    latest_message: Message | None = None
    history: list[Message] = Field(default_factory=list)


def test_persistence_with_base_model(persistence: StorageFlowPersistence) -> None:
    """Mirrors test_persistence_with_base_model."""

    @persist(persistence)
    class BaseModelFlow(Flow[HistoryState]):
        initial_state = HistoryState(latest_message=None, history=[])

        @start()
        def init_step(self) -> None:
            self.state.latest_message = Message(role="user", type="text", content="Hello, World!")
            self.state.history.append(self.state.latest_message)

    flow = BaseModelFlow(persistence=persistence)
    flow.kickoff()
    (message,) = flow.state.history
    assert flow.state.latest_message is not None
    assert (flow.state.latest_message.role, message.content) == ("user", "Hello, World!")
    saved = persistence.load_state(flow.state.id)
    assert saved is not None
    assert saved["history"] == [{"role": "user", "type": "text", "content": "Hello, World!"}]


# ---------------------------------------------------------------------- test_async_human_feedback.py


def test_save_and_load_pending_feedback(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestSQLitePendingFeedback.test_save_and_load_pending_feedback."""
    context = _context(
        "persist-test-123", method_output={"data": "test"}, emit=["approved", "rejected"], llm="gpt-4o-mini"
    )
    persistence.save_pending_feedback("persist-test-123", context, {"counter": 10, "items": ["a", "b"]})
    result = persistence.load_pending_feedback("persist-test-123")
    assert result is not None
    state, loaded = result
    assert (state["counter"], state["items"]) == (10, ["a", "b"])
    assert (loaded.flow_id, loaded.emit) == ("persist-test-123", ["approved", "rejected"])


def test_load_nonexistent_pending_feedback(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestSQLitePendingFeedback.test_load_nonexistent_pending_feedback."""
    assert persistence.load_pending_feedback("nonexistent-id") is None


def test_clear_pending_feedback(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestSQLitePendingFeedback.test_clear_pending_feedback."""
    persistence.save_pending_feedback("clear-test", _context("clear-test", "method"), {"key": "value"})
    assert persistence.load_pending_feedback("clear-test") is not None
    persistence.clear_pending_feedback("clear-test")
    assert persistence.load_pending_feedback("clear-test") is None


def test_replace_existing_pending_feedback(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestSQLitePendingFeedback.test_replace_existing_pending_feedback."""
    persistence.save_pending_feedback("replace-test", _context("replace-test", "method1"), {"version": 1})
    persistence.save_pending_feedback("replace-test", _context("replace-test", "method2"), {"version": 2})
    result = persistence.load_pending_feedback("replace-test")
    assert result is not None
    state, context = result
    assert (state["version"], context.method_name) == (2, "method2")


def test_from_pending_raises_for_missing_flow(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestFlowResumeWithFeedback.test_from_pending_raises_for_missing_flow."""

    class TestFlow(Flow):  # type: ignore[type-arg]
        @start()
        def begin(self) -> str:
            return "started"

    with pytest.raises(ValueError, match="No pending feedback found"):
        TestFlow.from_pending("nonexistent-id", persistence)


def test_from_pending_restores_state(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestFlowResumeWithFeedback.test_from_pending_restores_state."""

    class RestoreState(BaseModel):
        id: str = "test-restore-123"
        counter: int = 0

    class TestFlow(Flow[RestoreState]):
        @start()
        def begin(self) -> str:
            return "started"

    persistence.save_pending_feedback(
        "test-restore-123", _context("test-restore-123"), {"id": "test-restore-123", "counter": 42}
    )
    flow = TestFlow.from_pending("test-restore-123", persistence)
    assert flow._pending_feedback_context is not None
    assert flow._pending_feedback_context.flow_id == "test-restore-123"
    assert flow.state.counter == 42


def test_resume_basic(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestFlowResumeWithFeedback.test_resume_basic."""

    class TestFlow(Flow):  # type: ignore[type-arg]
        @start()
        @human_feedback(message="Review this:")
        def generate(self) -> str:
            return "generated content"

        @listen(generate)
        def process(self, feedback_result: Any) -> str:
            return f"Processed: {feedback_result.feedback}"

    context = _context(
        "resume-test-123", "generate", method_output="generated content", message="Review this:"
    )
    persistence.save_pending_feedback("resume-test-123", context, {"id": "resume-test-123"})
    flow = TestFlow.from_pending("resume-test-123", persistence)
    flow.resume("looks good!")
    assert flow.last_human_feedback is not None
    assert (flow.last_human_feedback.feedback, flow.last_human_feedback.output) == (
        "looks good!",
        "generated content",
    )
    assert persistence.load_pending_feedback("resume-test-123") is None


def test_full_async_flow_cycle(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestAsyncHumanFeedbackIntegration.test_full_async_flow_cycle: start, pause with the
    provider saving the pending feedback, resume from a new flow object."""
    paused: list[str] = []

    class SaveAndPause:
        def request_feedback(self, context: PendingFeedbackContext, flow: Flow[Any]) -> str:
            paused.append(context.flow_id)
            state = flow.state if isinstance(flow.state, dict) else flow.state.model_dump()
            persistence.save_pending_feedback(context.flow_id, context, state)
            raise HumanFeedbackPending(context=context)

    class ReviewFlow(Flow):  # type: ignore[type-arg]
        processed_feedback: str = ""

        @start()
        @human_feedback(message="Review this content:", provider=SaveAndPause())
        def generate(self) -> str:
            return "AI generated content"

        @listen(generate)
        def process(self, feedback_result: Any) -> str:
            self.processed_feedback = feedback_result.feedback
            return f"Final: {feedback_result.feedback}"

    result = ReviewFlow(persistence=persistence).kickoff()
    assert isinstance(result, HumanFeedbackPending)
    assert len(paused) == 1
    resumed = ReviewFlow.from_pending(paused[0], persistence)
    resumed.resume("This is my feedback")
    assert resumed.last_human_feedback is not None
    assert resumed.last_human_feedback.feedback == "This is my feedback"
    assert resumed.processed_feedback == "This is my feedback"
    assert persistence.load_pending_feedback(paused[0]) is None


def test_resume_from_async_context_raises_error(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestFlowResumeWithFeedback.test_resume_from_async_context_raises_error: the
    persistence is called from inside a running loop; resume() refuses that context itself."""

    class TestFlow(Flow):  # type: ignore[type-arg]
        @start()
        def begin(self) -> str:
            return "started"

    async def call_resume_from_async() -> None:
        persistence.save_pending_feedback(
            "async-context-test",
            _context("async-context-test", "begin", method_output="output"),
            {"id": "async-context-test"},
        )
        flow = TestFlow.from_pending("async-context-test", persistence)
        with pytest.raises(RuntimeError, match="cannot be called from within an async context"):
            flow.resume("feedback")

    asyncio.run(call_resume_from_async())


async def test_resume_async_direct(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestFlowResumeWithFeedback.test_resume_async_direct."""

    class TestFlow(Flow):  # type: ignore[type-arg]
        @start()
        @human_feedback(message="Review:")
        def generate(self) -> str:
            return "content"

        @listen(generate)
        def process(self, result: Any) -> str:
            return f"processed: {result.feedback}"

    persistence.save_pending_feedback(
        "async-direct-test", _context("async-direct-test", "generate"), {"id": "async-direct-test"}
    )
    flow = TestFlow.from_pending("async-direct-test", persistence)
    await flow.resume_async("async feedback")
    assert flow.last_human_feedback is not None
    assert flow.last_human_feedback.feedback == "async feedback"
    assert persistence.load_pending_feedback("async-direct-test") is None


def test_resume_routing(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestFlowResumeWithFeedback.test_resume_routing (the outcome collapse patched, as upstream)."""

    class TestFlow(Flow):  # type: ignore[type-arg]
        result_path: str = ""

        @start()
        @human_feedback(message="Approve?", emit=["approved", "rejected"], llm="gpt-4o-mini")
        def review(self) -> str:
            return "content"

        @listen("approved")
        def handle_approved(self) -> str:
            self.result_path = "approved"
            return "Approved!"

        @listen("rejected")
        def handle_rejected(self) -> str:
            self.result_path = "rejected"
            return "Rejected!"

    context = _context("route-test-123", message="Approve?", emit=["approved", "rejected"], llm="gpt-4o-mini")
    persistence.save_pending_feedback("route-test-123", context, {"id": "route-test-123"})
    flow = TestFlow.from_pending("route-test-123", persistence)
    with patch.object(flow, "_collapse_to_outcome", return_value="approved"):
        flow.resume("yes, this looks great")
    assert flow.last_human_feedback is not None
    assert flow.last_human_feedback.outcome == "approved"
    assert flow.result_path == "approved"


def test_async_provider_pauses_flow(persistence: StorageFlowPersistence) -> None:
    """Mirrors TestAsyncHumanFeedbackIntegration.test_async_provider_pauses_flow."""

    class PausingProvider:
        def request_feedback(self, context: PendingFeedbackContext, flow: Flow[Any]) -> str:
            state = flow.state if isinstance(flow.state, dict) else flow.state.model_dump()
            persistence.save_pending_feedback(context.flow_id, context, state)
            raise HumanFeedbackPending(context=context, callback_info={"saved": True})

    class TestFlow(Flow):  # type: ignore[type-arg]
        @start()
        @human_feedback(message="Review:", provider=PausingProvider())
        def generate(self) -> str:
            return "generated content"

    result = TestFlow(persistence=persistence).kickoff()
    assert isinstance(result, HumanFeedbackPending)
    assert result.callback_info["saved"] is True
    assert persistence.load_pending_feedback(result.context.flow_id) is not None


@pytest.mark.parametrize("feedback", ["", None])
def test_missing_feedback_uses_the_default_outcome(
    persistence: StorageFlowPersistence, feedback: str | None
) -> None:
    """Mirrors TestAsyncHumanFeedbackEdgeCases.test_empty_feedback_uses_default_outcome ("") and
    test_resume_without_feedback_uses_default (None: resume() without an argument)."""

    class TestFlow(Flow):  # type: ignore[type-arg]
        @start()
        def generate(self) -> str:
            return "content"

    context = _context(
        "default-test",
        "generate",
        emit=["approved", "rejected"],
        default_outcome="approved",
        llm="gpt-4o-mini",
    )
    persistence.save_pending_feedback("default-test", context, {"id": "default-test"})
    flow = TestFlow.from_pending("default-test", persistence)
    flow.resume() if feedback is None else flow.resume(feedback)
    assert flow.last_human_feedback is not None
    assert flow.last_human_feedback.outcome == "approved"
    assert flow.last_human_feedback.feedback == ""


def test_llm_config_survives_the_persistence_round_trip(persistence: StorageFlowPersistence) -> None:
    """Mirrors the persistence part of TestLLMObjectPreservedInContext
    .test_basellm_object_model_string_survives_roundtrip: a context whose ``llm`` is a model config
    dict comes back as that dict (the rest of that case exercises CrewAI's LLM classes)."""
    llm = {"model": "gemini/gemini-2.0-flash", "temperature": 0.2}
    persistence.save_pending_feedback(
        "llm-test", _context("llm-test", emit=["a", "b"], llm=llm), {"id": "llm-test"}
    )
    loaded = persistence.load_pending_feedback("llm-test")
    assert loaded is not None
    assert loaded[1].llm == llm
