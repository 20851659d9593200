"""tox.ini runs every backend's tests: each backend mark (tests/conftest.py) has its environment,
listed in env_list, so a backend added to the registry or to conftest's BACKENDS cannot fall
through the per-marker split (a test with no backend mark runs in ``core``)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from conftest import BACKEND_MARKERS

TOX_INI = Path(__file__).resolve().parent.parent / "tox.ini"


def test_every_backend_mark_has_a_tox_environment() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(TOX_INI, encoding="utf-8")
    env_list = {name.strip() for name in tox["tox"]["env_list"].split(",")}
    commands = dict(re.findall(r"^\s*(\w+): pytest -m (\w+)", tox["testenv"]["commands"], flags=re.MULTILINE))
    assert all(env == mark for env, mark in commands.items()), commands
    assert set(commands) == {*BACKEND_MARKERS, "core"}
    assert set(commands) <= env_list


def test_the_maf_tests_also_run_on_the_oldest_maf_the_extra_accepts() -> None:
    """``maf_oldest`` pins the lower bound of the ``maf`` extra (pyproject.toml) and runs the tests
    marked ``maf``; the other environments resolve the newest release the extra accepts."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(TOX_INI, encoding="utf-8")
    assert "maf_oldest" in {name.strip() for name in tox["tox"]["env_list"].split(",")}
    section = tox["testenv:maf_oldest"]
    (pin,) = re.findall(r"^\s*agent-framework-core==([\w.]+)\s*$", section["deps"], flags=re.MULTILINE)
    assert f"CHECKPOINT_MAF_VERSION = {pin}" in section["set_env"]
    assert re.fullmatch(r'pytest -m "maf and \([\w ]+\)" \{posargs\}', section["commands"].strip())
    pyproject = (TOX_INI.parent / "pyproject.toml").read_text(encoding="utf-8")
    (extra,) = re.findall(r'^maf = \["agent-framework-core([^"]+)"\]', pyproject, flags=re.MULTILINE)
    assert f">={pin}," in extra, f"maf_oldest pins {pin}, the maf extra accepts {extra}"
