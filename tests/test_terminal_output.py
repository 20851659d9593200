"""What the CLIs print is inert: ids and names from a hostile store are never rich markup and
never reach the terminal as control characters; a reader that closes the pipe early ends the
command quietly; credentials in a URL never reach the output.

The store is a SQLite file whose index is edited behind the storage's back, as an attacker with
write access would; main() runs in-process except where a closed pipe needs a real process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from storages import WorkflowCheckpoint, open_storage
from storages.tools.cli.main import main
from storages.tools.terminal import EXIT_BROKEN_PIPE, json_dumps, printable

sqlite_mark = pytest.mark.sqlite

TITLE_ESCAPE = "\x1b]0;pwned\x07"
"""An OSC sequence that retitles the terminal window."""
HOSTILE_NAME = f"evil{TITLE_ESCAPE}\x9b2J\u202etxt.exe"
LINK = "[link=https://evil.example/]click[/link]"


@pytest.fixture
def forced_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # rich renders styles and hyperlinks only on a terminal; make captured output one.
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "200")


def _store(directory: Path, *ids: str) -> str:
    url = f"sqlite:///{directory}/ck.db"

    async def seed() -> None:
        async with open_storage(url) as storage:
            previous = None
            for checkpoint_id in ids:
                await storage.save(WorkflowCheckpoint("run", "sig", checkpoint_id, previous))
                previous = checkpoint_id

    asyncio.run(seed())
    return url


def _edit(url: str, statement: str, *parameters: str) -> None:
    with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
        connection.execute(statement, parameters)
    connection.close()


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ---------------------------------------------------------------------- helpers


def test_printable_escapes_every_control_character_and_nothing_else() -> None:
    assert printable("plain [bold]ünïcode[/] 🙂") == "plain [bold]ünïcode[/] 🙂"
    assert printable(HOSTILE_NAME) == "evil\\x1b]0;pwned\\x07\\x9b2J\\u202etxt.exe"
    assert printable("a\nb\tc\x7f") == "a\\nb\\tc\\x7f"
    assert printable("a\nb\x1b", multiline=True) == "a\nb\\x1b"


def test_json_output_escapes_what_json_leaves_raw() -> None:
    dumped = json_dumps({"name": HOSTILE_NAME, "ok": "ünïcode"})
    assert json.loads(dumped) == {"name": HOSTILE_NAME, "ok": "ünïcode"}
    assert not any(character in dumped for character in "\x1b\x07\x9b\u202e")
    assert "ünïcode" in dumped


# ---------------------------------------------------------------------- markup


@sqlite_mark
@pytest.mark.usefixtures("forced_terminal")
@pytest.mark.parametrize("checkpoint_id", ["[/]-child", "[bold red]x", LINK])
def test_inspect_shows_a_markup_like_id_literally(
    checkpoint_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _store(tmp_path, checkpoint_id)
    for args in (["--checkpoint", checkpoint_id], ["run"], []):
        status, out, err = _run(["inspect", url, *args], capsys)
        assert (status, err) == (0, "")
        assert checkpoint_id in _without_styles(out)
        assert "\x1b]8;" not in out  # no hyperlink
        if args[:1] == ["--checkpoint"]:
            assert _without_styles(out).splitlines()[0].strip() == f"checkpoint {checkpoint_id}"  # title


@sqlite_mark
@pytest.mark.usefixtures("forced_terminal")
def test_a_markup_like_storage_path_is_shown_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / LINK.replace("/", "_")
    directory.mkdir()
    url = _store(directory, "a", "b")
    _edit(url, "UPDATE checkpoints SET previous_checkpoint_id = 'never-saved' WHERE checkpoint_id = 'b'")
    for command in (["inspect", url], ["verify", url]):
        _, out, err = _run(command, capsys)
        assert err == ""
        assert "\x1b]8;" not in out
        assert LINK.replace("/", "_") in _without_styles(out)


def _without_styles(text: str) -> str:
    """Output with rich's own SGR style sequences removed (they end in 'm'), nothing else."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# ---------------------------------------------------------------------- control characters


@sqlite_mark
@pytest.mark.usefixtures("forced_terminal")
def test_control_characters_in_the_index_are_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _store(tmp_path, "a", "b", "c")
    _edit(url, "UPDATE checkpoints SET previous_checkpoint_id = ? WHERE checkpoint_id = 'c'", HOSTILE_NAME)
    _edit(url, "UPDATE checkpoints SET checkpoint_id = ? WHERE checkpoint_id = 'b'", HOSTILE_NAME)
    status, out, err = _run(["inspect", url, "run"], capsys)
    assert (status, err) == (0, "")
    assert printable(HOSTILE_NAME) in " ".join(_without_styles(out).split())
    for raw in (TITLE_ESCAPE, "\x9b", "\u202e"):
        assert raw not in out
    status, out, err = _run(["inspect", url, "run", "--json"], capsys)
    assert (status, err) == (0, "")
    assert not any(character in out for character in "\x1b\x07\x9b\u202e")
    assert HOSTILE_NAME in {node.get("checkpoint_id") for node in json.loads(out)["nodes"]}
    # Naming a hostile id on the command line is refused with the id shown escaped.
    status, out, err = _run(["inspect", url, "--checkpoint", HOSTILE_NAME], capsys)
    assert (status, out) == (2, "")
    assert printable(HOSTILE_NAME) in err
    assert TITLE_ESCAPE not in err


@sqlite_mark
def test_an_error_line_shows_control_characters_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(["verify", f"sqlite:///no-such{TITLE_ESCAPE}.db"], capsys)
    assert (status, out) == (3, "")  # nothing there: the file does not exist
    assert TITLE_ESCAPE not in err
    assert printable(TITLE_ESCAPE) in err


# ---------------------------------------------------------------------- credentials


def test_a_url_password_never_reaches_the_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    for url in (
        "rediss://alice:hunter2@cache.example:6380/0?ttl=soon",
        "s3://bucket/p?aws_secret_access_key=hunter2&colour=red",
    ):
        status, out, err = _run(["verify", url], capsys)
        assert status == 2
        assert "hunter2" not in out + err
        assert "***" in err


# ---------------------------------------------------------------------- closed pipes


def _with_closed_stdout(*command: str) -> subprocess.CompletedProcess[str]:
    """Run a console script whose stdout is a pipe nobody reads: the reader already went away."""
    script = Path(sys.executable).with_name(command[0])
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [str(script), *command[1:]],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


@sqlite_mark
def test_checkpoint_storages_exits_quietly_when_the_reader_goes_away(tmp_path: Path) -> None:
    url = _store(tmp_path, "a", "b")
    for command in (["verify", url, "--json"], ["verify", url], ["inspect", url, "run"]):
        completed = _with_closed_stdout("checkpoint-storages", *command)
        assert (completed.returncode, completed.stderr) == (EXIT_BROKEN_PIPE, ""), command


def test_checkpoint_conformance_exits_quietly_when_the_reader_goes_away() -> None:
    completed = _with_closed_stdout("checkpoint-conformance", "--list")
    assert (completed.returncode, completed.stderr) == (EXIT_BROKEN_PIPE, "")
