"""What the command-line tools print: data shown as data, and quiet exits on closed pipes.

Ids, workflow names, signatures and messages come from the store, which an attacker with write
access controls. Printed as they are, they could drive the terminal (an ESC sequence clears the
screen, retitles the window or writes a hyperlink), forge output lines (a newline) or reorder
text (bidirectional overrides); given to rich as markup, ``[/]`` crashes the renderer and
``[link=...]`` becomes a hyperlink. So every piece of data goes through :func:`printable` and
reaches rich only inside a :class:`rich.text.Text`, which is never parsed as markup;
:func:`plain` does both. JSON output escapes what JSON itself leaves raw (:func:`json_dumps`).

A reader that goes away early (``verify --json | head``) closes the pipe: each CLI's ``main``
catches the ``BrokenPipeError`` (rich's console raises one too, see :func:`console`) and calls
:func:`silence_stdout`, then exits with :data:`EXIT_BROKEN_PIPE`, without a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import unicodedata
from typing import Any

from rich.console import Console
from rich.style import StyleType
from rich.text import Text

EXIT_BROKEN_PIPE = 128 + int(getattr(signal, "SIGPIPE", 13))
"""Exit status after the reader closed stdout: what a shell reports for a process ended by SIGPIPE."""

# Characters that change how the text around them is shown: bidirectional embeddings, overrides
# and isolates, the Arabic letter mark, and the line and paragraph separators.
_INVISIBLE_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
)


def _is_control(character: str) -> bool:
    return unicodedata.category(character) == "Cc" or character in _INVISIBLE_CONTROLS


_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(character: str) -> str:
    code = ord(character)
    if character in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[character]
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object, *, multiline: bool = False) -> str:
    """``text`` (``str()`` of it) with every control character (C0, DEL, C1, newline and tab
    included) and every bidirectional or line-separating format character written as an escape
    (``\\x1b``, ``\\u202e``), so it prints as one inert line; ``multiline`` keeps newlines."""
    shown = str(text)

    def escape(character: str) -> bool:
        return _is_control(character) and not (multiline and character == "\n")

    if not any(escape(character) for character in shown):
        return shown
    return "".join(_escaped(character) if escape(character) else character for character in shown)


def plain(text: object, style: StyleType = "", *, multiline: bool = False) -> Text:
    """Data as a rich ``Text``: control characters escaped, brackets shown as brackets."""
    return Text(printable(text, multiline=multiline), style=style)


def json_dumps(data: Any) -> str:
    """Indented JSON, non-ASCII text kept readable, with DEL, C1 controls and the characters
    :func:`printable` escapes written as ``\\uXXXX`` (JSON escapes only C0 controls itself)."""
    dumped = json.dumps(data, indent=2, ensure_ascii=False)
    if not any(_is_control(character) for character in dumped if character not in "\n "):
        return dumped
    # Outside strings the dump holds only ASCII punctuation, newlines and spaces, so every
    # control character left is inside a string, where \uXXXX means the same character.
    return "".join(
        f"\\u{ord(character):04x}" if character != "\n" and _is_control(character) else character
        for character in dumped
    )


class _PipeConsole(Console):
    """A console that reports a closed pipe as ``BrokenPipeError`` for ``main`` to handle,
    instead of rich's own handling (exit status 1, which means something else to our CLIs)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console(**options: Any) -> Console:
    """The console a CLI prints through."""
    return _PipeConsole(**options)


def silence_stdout() -> None:
    """After a ``BrokenPipeError`` on stdout: point it at the null device, so the interpreter's
    final flush of what is still buffered does not fail (and print) a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout has no file descriptor (captured): nothing to flush
        pass


__all__ = ["EXIT_BROKEN_PIPE", "console", "json_dumps", "plain", "printable", "silence_stdout"]
