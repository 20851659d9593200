"""What the ``checkpoint-storages`` commands share: their two one-line outcomes that are not a
report (:class:`UsageError`, exit status 2; :class:`NothingThere`, 3), the application's type
policy as the command line gives it, opening the storage a command only reads, and
``--app-dir``."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from ...codec import CheckpointCodec
from ...contract import Capability
from ...engine import CheckpointStore
from ...urls import open_storage
from ..verify import describe_storage
from ..verify.render import TypePolicy


class UsageError(Exception):
    """A request that cannot be carried out; reported in one line with exit status 2."""


class NothingThere(Exception):
    """What the command was pointed at holds no checkpoint; one line, exit status 3."""


def use_app_dirs(directories: list[str] | None) -> None:
    """``--app-dir DIR``: the application's modules import from DIR, as uvicorn's option makes
    them (DIR goes first on ``sys.path``, in the order given)."""
    for directory in reversed(directories or ()):
        path = Path(directory).expanduser().resolve()
        if not path.is_dir():
            raise UsageError(f"--app-dir {directory}: no such directory")
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    if directories:
        importlib.invalidate_caches()


async def not_found(storage: CheckpointStore, what: str) -> NothingThere:
    """``what`` was not found; when the store holds nothing at all, that is what is said (the URL
    is likely wrong, not the name)."""
    if Capability.LIST_WORKFLOWS in storage.capabilities:
        empty = not await storage.list_workflows()
    else:
        empty = not await storage.list_records()
    name = describe_storage(storage)
    return NothingThere(holds_nothing(name) if empty else f"{what} in {name}")


def holds_nothing(storage: str) -> str:
    return (
        f"{storage} holds no checkpoint; check the URL (a misspelt path, database, prefix, schema "
        "or bucket names an empty store)"
    )


def output_file(given: str) -> Path:
    """``--html OUT``, checked before any work: its directory must exist, and OUT be no directory."""
    out = Path(given).expanduser()
    if not out.parent.is_dir():
        raise UsageError(f"cannot write {given}: no directory {out.parent}")
    if out.is_dir():
        raise UsageError(f"cannot write {given}: it is a directory")
    return out


def codec_of(args: argparse.Namespace) -> CheckpointCodec:
    """The application's own policy, given as its storage URL gives it (comma-separated lists)."""
    policy = policy_of(args)
    return CheckpointCodec(allowed_types=sorted(policy.types), allowed_modules=policy.modules)


def policy_of(args: argparse.Namespace) -> TypePolicy:
    types = [
        *(getattr(args, "allow_type", None) or ()),
        *comma_list(getattr(args, "allowed_checkpoint_types", None)),
    ]
    return TypePolicy(
        frozenset(types),
        tuple(comma_list(getattr(args, "allowed_modules", None))),
        module_option=hasattr(args, "allowed_modules"),
    )


def open_read_only(args: argparse.Namespace) -> CheckpointStore:
    """The storage at ``args.url``, through a handle that only reads where the storage offers one
    (every built-in backend but memory): it creates nothing and refuses a store that does not
    exist (StoreNotFoundError, when it opens)."""
    storage = open_storage(args.url, codec=codec_of(args))
    read_only_handle = getattr(storage, "read_only_handle", None)
    return read_only_handle() if callable(read_only_handle) else storage


def open_writable(args: argparse.Namespace) -> CheckpointStore:
    """The storage at ``args.url`` through a handle that may write (``verify --repair``)."""
    return open_storage(args.url, codec=codec_of(args))


def comma_list(given: list[str] | None) -> list[str]:
    return [item.strip() for value in given or () for item in value.split(",") if item.strip()]


__all__ = [
    "NothingThere",
    "UsageError",
    "codec_of",
    "comma_list",
    "holds_nothing",
    "not_found",
    "open_read_only",
    "open_writable",
    "output_file",
    "policy_of",
    "use_app_dirs",
]
