"""Real LangGraph graphs the LangGraph runner profile and the tests drive: a parent graph whose
middle node is a compiled subgraph that asks a human with ``interrupt()``.

The subgraph inherits the parent's checkpointer, so its checkpoints live in their own namespace
(``ask:<task id>``) of the same thread; resuming the parent with ``Command(resume=...)`` resumes
the subgraph from its own latest checkpoint.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

QUESTION = "Which colour?"


class TourState(TypedDict, total=False):
    steps: Annotated[list[str], operator.add]
    trail: Annotated[list[str], operator.add]
    answer: str


class AskState(TypedDict, total=False):
    """The subgraph's own schema: it shares ``trail`` and ``answer`` with the parent, not
    ``steps``, so the parent's reducer never re-adds what the subgraph was handed."""

    trail: Annotated[list[str], operator.add]
    answer: str


def _prepare(state: AskState) -> dict[str, Any]:
    return {"trail": ["sub:prepare"]}


def _ask(state: AskState) -> dict[str, Any]:
    answer = interrupt(QUESTION)
    return {"trail": ["sub:ask"], "answer": str(answer)}


def _start(state: TourState) -> dict[str, Any]:
    return {"steps": ["start"]}


def _finish(state: TourState) -> dict[str, Any]:
    return {"steps": ["finish"]}


def build_subgraph() -> Any:
    builder = StateGraph(AskState)
    builder.add_node("prepare", _prepare)
    builder.add_node("ask_human", _ask)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "ask_human")
    builder.add_edge("ask_human", END)
    return builder.compile()


def build_tour(checkpointer: Any) -> Any:
    """start -> ask (the subgraph, interrupted in ask_human) -> finish."""
    builder = StateGraph(TourState)
    builder.add_node("start", _start)
    builder.add_node("ask", build_subgraph())
    builder.add_node("finish", _finish)
    builder.add_edge(START, "start")
    builder.add_edge("start", "ask")
    builder.add_edge("ask", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=checkpointer)


def finished(answer: str) -> dict[str, Any]:
    """The final state of a tour run to the end once with ``answer``."""
    return {"steps": ["start", "finish"], "trail": ["sub:prepare", "sub:ask"], "answer": answer}


def thread_config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}
