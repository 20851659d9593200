"""Which application types a storage keeps, and how a MAF user allows them.

The in-memory storage keeps any value the codec can represent faithfully, as MAF's InMemory keeps
any object; durable storages keep what the application allowed (MAF's own argument name,
``allowed_checkpoint_types``, or ``allowed_modules``), so a fresh process reads what the writer
wrote. A refused save names the type, the path and the fix.
"""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pydantic
import pytest

from storages import (
    CheckpointTypeNotAllowedError,
    InMemoryCheckpointStorage,
    SQLiteCheckpointStorage,
    StorageConfigurationError,
    UnserializableValueError,
    WorkflowCheckpoint,
    open_storage,
)

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass
class Ticket:
    title: str
    tags: tuple[str, ...] = ()


class Severity(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Approval(pydantic.BaseModel):
    approver: str
    granted: bool


class Point(NamedTuple):
    x: int
    y: int


def app_state() -> dict[str, object]:
    return {
        "ticket": Ticket("disk full", ("ops",)),
        "severity": Severity.HIGH,
        "approval": Approval(approver="ana", granted=True),
        "where": Point(3, 4),
    }


def checkpoint(**fields: object) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name="app", graph_signature_hash="sig", **fields)  # type: ignore[arg-type]


KEYS = [f"{__name__}:{name}" for name in ("Ticket", "Severity", "Approval", "Point")]


@pytest.mark.memory
async def test_in_memory_storage_keeps_app_types_without_registration() -> None:
    storage = InMemoryCheckpointStorage()
    saved = checkpoint(state=app_state())
    await storage.save(saved)
    loaded = await storage.load(saved.checkpoint_id)
    assert loaded.state == app_state()
    assert type(loaded.state["where"]) is Point
    other_handle = storage.new_handle()
    assert (await other_handle.load(saved.checkpoint_id)).state == app_state()


@pytest.mark.memory
async def test_in_memory_storage_still_refuses_what_it_cannot_represent() -> None:
    storage = InMemoryCheckpointStorage()
    with pytest.raises(UnserializableValueError, match=r"state\['obj'\]"):
        await storage.save(checkpoint(state={"obj": object()}))


@pytest.mark.sqlite
async def test_a_durable_storage_refuses_an_unallowed_type_naming_path_and_fix(tmp_path: Path) -> None:
    async with SQLiteCheckpointStorage(tmp_path / "c.db") as storage:
        with pytest.raises(UnserializableValueError) as caught:
            await storage.save(checkpoint(state={"ticket": Ticket("x")}))
    message = str(caught.value)
    assert f"{__name__}:Ticket" in message
    assert "checkpoint.state['ticket']" in message
    assert f"allowed_checkpoint_types=['{__name__}:Ticket']" in message
    assert f"allowed_checkpoint_types={__name__}:Ticket" in message  # the URL option


@pytest.mark.sqlite
async def test_allowed_checkpoint_types_and_modules_work_in_constructors_and_urls(tmp_path: Path) -> None:
    saved = checkpoint(state=app_state())
    async with SQLiteCheckpointStorage(tmp_path / "a.db", allowed_checkpoint_types=KEYS) as storage:
        await storage.save(saved)
        assert (await storage.load(saved.checkpoint_id)).state == app_state()
    async with SQLiteCheckpointStorage(tmp_path / "a.db", allowed_modules=[__name__]) as storage:
        assert (await storage.load(saved.checkpoint_id)).state == app_state()
    url = f"sqlite:///{tmp_path / 'b.db'}?allowed_checkpoint_types={','.join(KEYS)}"
    async with open_storage(url) as storage:
        await storage.save(saved)
    async with open_storage(f"sqlite:///{tmp_path / 'b.db'}?allowed_modules={__name__}") as storage:
        assert (await storage.load(saved.checkpoint_id)).state == app_state()
    async with open_storage(f"sqlite:///{tmp_path / 'b.db'}") as storage:
        with pytest.raises(
            CheckpointTypeNotAllowedError, match="Checkpoint deserialization blocked for type"
        ):
            await storage.load(saved.checkpoint_id)
    with pytest.raises(StorageConfigurationError, match="allowed_modules"):
        open_storage(f"sqlite:///{tmp_path / 'c.db'}?allowed_modules=not*a*module")


@pytest.mark.sqlite
def test_a_fresh_process_resumes_as_the_writer_did(tmp_path: Path) -> None:
    """The writer and a fresh reader give the same allowance and see the same checkpoint; a
    reader without it gets the typed refusal, not corruption."""
    module = tmp_path / "ticketing_app.py"
    module.write_text(
        textwrap.dedent(
            """
            import dataclasses, enum
            @dataclasses.dataclass
            class Ticket:
                title: str
            class Severity(enum.Enum):
                HIGH = "high"
            """
        )
    )
    program = textwrap.dedent(
        """
        import asyncio, sys
        import ticketing_app
        from storages import open_storage, WorkflowCheckpoint, CheckpointTypeNotAllowedError
        url, mode = sys.argv[1], sys.argv[2]
        async def main():
            async with open_storage(url) as storage:
                if mode == "write":
                    cp = WorkflowCheckpoint(workflow_name="app", graph_signature_hash="s", checkpoint_id="c1",
                        state={"t": ticketing_app.Ticket("x"), "s": ticketing_app.Severity.HIGH})
                    await storage.save(cp)
                    print("saved")
                else:
                    try:
                        cp = await storage.load("c1")
                    except CheckpointTypeNotAllowedError:
                        print("refused")
                        return
                    print(type(cp.state["t"]).__qualname__, cp.state["s"].name)
        asyncio.run(main())
        """
    )
    database = tmp_path / "app.db"
    allowed = f"sqlite:///{database}?allowed_modules=ticketing_app"

    def run(url: str, mode: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", program, url, mode],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={"PYTHONPATH": f"{tmp_path}:{REPO_ROOT}", "PATH": "/usr/bin:/bin"},
            timeout=60,
            check=True,
        )
        return done.stdout.strip()

    assert run(allowed, "write") == "saved"
    assert run(allowed, "read") == "Ticket HIGH"
    assert run(f"sqlite:///{database}", "read") == "refused"
