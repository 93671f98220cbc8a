"""What the command line prints is text, never terminal control.

An event's message, an entity, a note: any tenant can write them, and a terminal obeys what
it prints. An ESC starts a sequence that can clear the screen, move the cursor over a line
already printed, or (OSC 52) write to the operator's clipboard; a bare CR overprints a line.
So every field the views print goes through `field` (all control characters shown escaped:
`\\x1b`, `\\r`), and the command line's standard output through `Printable`, which lets
through only line breaks, tabs and the colour codes (SGR, `ESC [ ... m`) the views add.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

_FIELD = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_STREAM = re.compile(r"\x1b(?!\[[0-9;]{0,16}m)|[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f-\x9f]")


def _shown(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def field(text: Any) -> str:
    """One printed field: every control character (a line break too) shown escaped."""
    return _FIELD.sub(_shown, str(text))


def printable(text: str) -> str:
    """Printed text: line breaks, tabs and colour codes kept, other control shown escaped."""
    return _STREAM.sub(_shown, text)


class Printable:
    """A text stream that writes `printable` text (the command line's stdout and stderr)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text) if isinstance(text, str) else text)
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, encoding, buffer, ...
        return getattr(self._stream, name)


def guard(stream: Any) -> Any:
    """`stream` wrapped once."""
    return stream if isinstance(stream, Printable) else Printable(stream)
