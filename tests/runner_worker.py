"""The process tests/test_runner_kill_resume.py runs, kills with SIGKILL and runs again.

``python runner_worker.py RUNNER URL ID run`` runs a real CrewAI flow (RUNNER ``crewai``) or Burr
application (``burr``) over our adapter at URL, one persisted step after another, printing
``WORKER ack <count>`` once each step's save was acknowledged, until killed.
``... ID resume`` reads what was stored (``WORKER loaded <count> <step>``), runs one more step as
the runner resumes it (``WORKER ack <count>``) and exits.
"""

from __future__ import annotations

import sys
from typing import Any

import runner_env  # noqa: F401 - before crewai

PARTITION = "kill"


def say(*words: object) -> None:
    sys.stdout.write("WORKER " + " ".join(map(str, words)) + "\n")
    sys.stdout.flush()


def acknowledge(count: int) -> None:
    """Say a step was saved, then wait for the parent's go before the next one: the parent's
    kill lands between two steps, whatever its read of this pipe lags behind."""
    say("ack", count)
    sys.stdin.readline()


def crewai(url: str, flow_id: str, mode: str) -> None:
    from crewai.flow.flow import Flow, FlowState, start
    from crewai.flow.persistence import persist

    from storages.runners.crewai import StorageFlowPersistence

    class Tally(FlowState):
        count: int = 0

    persistence = StorageFlowPersistence(url)

    @persist(persistence)
    class Ticker(Flow[Tally]):
        @start()
        def tick(self) -> None:
            self.state.count += 1

    def step() -> int:
        flow = Ticker(persistence=persistence)
        flow.kickoff(inputs={"id": flow_id})
        return int(flow.state.count)

    if mode == "resume":
        stored = persistence.load_state(flow_id)
        say("loaded", 0 if stored is None else stored["count"], "-")
        say("ack", step())
        persistence.close()
        return
    while True:
        acknowledge(step())


def burr(url: str, app_id: str, mode: str) -> None:
    from burr.core import ApplicationBuilder, State, action

    from storages.runners.burr import StorageStatePersister

    @action(reads=["count"], writes=["count"])
    def tick(state: State[Any]) -> tuple[dict[str, Any], State[Any]]:
        return {}, state.update(count=state["count"] + 1)

    persister = StorageStatePersister(url)
    persister.initialize()
    app = (
        ApplicationBuilder()
        .with_actions(tick=tick)
        .with_transitions(("tick", "tick"))
        .initialize_from(
            persister, resume_at_next_action=True, default_state={"count": 0}, default_entrypoint="tick"
        )
        .with_state_persister(persister)
        .with_identifiers(app_id=app_id, partition_key=PARTITION)
        .build()
    )
    if mode == "resume":
        stored = persister.load(PARTITION, app_id)
        say("loaded", app.state["count"], "-" if stored is None else stored["sequence_id"])
        _, _, state = app.step()
        say("ack", state["count"])
        persister.cleanup()
        return
    while True:
        _, _, state = app.step()
        acknowledge(state["count"])


if __name__ == "__main__":
    runner, url, identifier, mode = sys.argv[1:5]
    {"crewai": crewai, "burr": burr}[runner](url, identifier, mode)
