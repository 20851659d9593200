"""Apache Burr over any storage: an application stops after two steps, a new one resumes at the third.

    python examples/burr_app.py [STORAGE_URL]

Without a URL the steps go to a SQLite file in a fresh temporary directory. Two lines switch a
Burr project over (marked below): build a StorageStatePersister, and hand it to the builder's
``initialize_from`` and ``with_state_persister``.
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any

from burr.core import ApplicationBuilder, State, action

from storages.runners.burr import StorageStatePersister


@action(reads=["count"], writes=["count"])
def count(state: State[Any]) -> tuple[dict[str, Any], State[Any]]:
    return {}, state.update(count=state["count"] + 1)


@action(reads=["count"], writes=["log"])
def record(state: State[Any]) -> tuple[dict[str, Any], State[Any]]:
    return {}, state.append(log=f"count reached {state['count']}")


def shown(state: State[Any]) -> dict[str, Any]:
    """The application's own keys (Burr adds a few of its own, named __...)."""
    return {key: value for key, value in state.get_all().items() if not key.startswith("__")}


def application(persister: StorageStatePersister) -> Any:
    return (
        ApplicationBuilder()
        .with_actions(count=count, record=record)
        .with_transitions(("count", "record"), ("record", "count"))
        .initialize_from(  # switch-over line 2 of 2 (with with_state_persister below)
            persister,
            resume_at_next_action=True,
            default_state={"count": 0, "log": []},
            default_entrypoint="count",
        )
        .with_state_persister(persister)
        .with_identifiers(app_id="counter-1", partition_key="examples")
        .build()
    )


url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{tempfile.mkdtemp()}/burr.db"
with StorageStatePersister(url) as persister:  # switch-over line 1 of 2
    first = application(persister)
    first.step()
    first.step()
    print(f"first run stopped after two steps: {shown(first.state)}")

with StorageStatePersister(url) as persister:
    resumed = application(persister)
    print(f"resumed after step {resumed.sequence_id} with {shown(resumed.state)}")
    action_, _, state = resumed.step()
    print(f"ran {action_.name}: count {state['count']}, log {state['log']}")
    print(f"applications stored: {persister.list_app_ids('examples')}")
