"""CrewAI Flows over any storage: a flow stops half-way, then a new run resumes it from the store.

    python examples/crewai_flow.py [STORAGE_URL]

Without a URL the flow's states go to a SQLite file in a fresh temporary directory. Two lines
switch a CrewAI project over (marked below): build a StorageFlowPersistence, hand it to @persist.
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # this example sends nothing anywhere
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

from crewai.flow.flow import Flow, FlowState, listen, start
from crewai.flow.persistence import persist
from pydantic import Field

from storages.runners.crewai import StorageFlowPersistence

url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{tempfile.mkdtemp()}/flows.db"
persistence = StorageFlowPersistence(url)  # switch-over line 1 of 2

INTERRUPT = {"review": True}
"""The first run stops before its review, as a crashed worker would."""


class Draft(FlowState):
    outline: list[str] = Field(default_factory=list)
    outlined_times: int = 0
    approved: bool = False


@persist(persistence)  # switch-over line 2 of 2
class Writer(Flow[Draft]):
    @start()
    def outline_it(self) -> None:
        if not self.state.outline:  # restored state keeps the outline: no second draft
            self.state.outline = ["why", "how", "what next"]
            self.state.outlined_times += 1

    @listen(outline_it)
    def review(self) -> None:
        if INTERRUPT["review"]:
            raise RuntimeError("worker lost before the review")
        self.state.approved = True


first = Writer(persistence=persistence)
try:
    first.kickoff()
except RuntimeError as stopped:
    print(f"first run stopped: {stopped}")
flow_id = first.state.id
print(f"stored state after the first run: {persistence.load_state(flow_id)}")

INTERRUPT["review"] = False
resumed = Writer(persistence=persistence)
resumed.kickoff(inputs={"id": flow_id})
state = resumed.state
print(f"resumed: outline {state.outline}, drafted {state.outlined_times} time(s), approved {state.approved}")
persistence.close()
