"""What a generated program draws its names, ids, signatures and large values from, and the
settings (from the storage's declared capabilities) that bound what it may call.

Kept apart from the drawing itself: these are the collisions a broken key scheme confuses (case,
Unicode normalisation, trailing spaces, shared prefixes, delimiters), the part of the kit a
reader checks against a backend's key layout.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from storages.contract import Capability

DEFAULT_MAX_DEPTH = 100_000
"""The walk depth a program asks for when it means all of a chain."""

# Suffixes that collide with "flow" in the ways broken key schemes confuse: case, normalisation,
# trailing space, a shared prefix, and characters that are delimiters somewhere.
WORKFLOW_SUFFIXES = (
    "flow",
    "Flow",
    "flow ",
    "flo",
    "flowé",
    "flowe\u0301",
    "flow:1",
    "flow/1",
    "flow{1}",
    "flow*",
    "flow%2F1",
    "flow-" + "w" * 230,  # with the prefix, the longest name the contract accepts
)
CHILD_SUFFIXES = ("child", "Child", "child ", "flow")
SIGNATURES = ("sig-a", "sig-b", "SIG-A", "sig-a ", "sig-ü/日本🙂")
LARGE_VALUES = (bytes(range(256)) * 800, "é" * 70_000, list(range(20_000)), bytearray(b"\x00") * 70_000)
"""Values past 64 KiB: where a column type, a frame or a page size changes."""
WRITE_KINDS = frozenset(
    {"save", "save_fenced", "delete", "prune", "delete_workflow", "put_writes", "delete_writes"}
)
ID_DECORATIONS = ("", "", "", "", "X", " ", "é", "e\u0301", ":k", "/..", "{t}", "%2F", "?q#f", "\\")


class Namer:
    """Names and ids of one program, all starting with ``ck-m<tag>-`` so runs never meet."""

    def __init__(self, tag: str) -> None:
        self.prefix = f"ck-m{tag}-"
        self.counter = 0

    def workflow(self, suffix: str) -> str:
        return (self.prefix + suffix)[:256]

    def new_id(self, rng: random.Random) -> str:
        self.counter += 1
        made = f"{self.prefix}c{self.counter}{rng.choice(ID_DECORATIONS)}"
        if rng.random() < 0.03:
            made = (made + "-").ljust(256, "z")  # the longest id the contract accepts
        return made

    def twin_of(self, checkpoint_id: str, rng: random.Random) -> str:
        """An id that differs from a stored one only the way a broken key scheme might confuse:
        case, Unicode normalisation, a trailing space, a shared prefix."""
        if "é" in checkpoint_id and rng.random() < 0.6:
            return checkpoint_id.replace("é", "e\u0301")
        if "e\u0301" in checkpoint_id and rng.random() < 0.6:
            return checkpoint_id.replace("e\u0301", "é")
        if "/" in checkpoint_id and rng.random() < 0.5:
            return checkpoint_id.replace("/", "%2F", 1)  # what a URL-decoding key scheme merges
        if "%2F" in checkpoint_id and rng.random() < 0.5:
            return checkpoint_id.replace("%2F", "/", 1)
        twins = [checkpoint_id + " ", checkpoint_id + "0", checkpoint_id[:-1] + "X"]
        if checkpoint_id.endswith(" "):
            twins.append(checkpoint_id.rstrip(" "))
        body = checkpoint_id[len(self.prefix) :]
        if "c" in body:
            twins.append(self.prefix + body.replace("c", "C", 1))
        if len(body) > 2:
            twins.append(checkpoint_id[:-1])
        return rng.choice(twins)


@dataclass
class Settings:
    """What the program may use, from the storage's declared capabilities."""

    capabilities: frozenset[Capability]
    handles: int = 1
    rebuild: bool = False
    load_signature: bool = False
    """load() takes expected_graph_signature_hash (detected from its signature)."""

    def has(self, capability: Capability) -> bool:
        return capability in self.capabilities
