"""Regular expressions people write into the service (subscription matchers, routing rules,
the planned-work reasons of a rules file) run on RE2, not Python's `re`.

Python's engine backtracks: `(.|.|.|.)+!` against a few dozen characters takes minutes, and
it ran on the thread that serves every request (a subscription matcher on every alerts pass,
a routing rule in a monitor replay). RE2 takes time linear in the text whatever the pattern,
which is also what Alertmanager's and Prometheus' matchers use (Go's RE2): a matcher copied
from an Alertmanager route means the same here. What RE2 lacks (backreferences, lookaround)
is refused when the pattern is written, naming the construct.
"""

from __future__ import annotations

import functools
from typing import Any

import re2

MAX_PATTERN = 1000
"""Characters of one pattern (a matcher or a rule is a line, not a program)."""

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a tenant's bad pattern is a 400 naming it, not a stderr line
_OPTIONS.max_mem = 8 << 20  # the compiled program's memory: a huge repetition is refused


@functools.lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Any:
    """The compiled pattern; ValueError saying why a pattern is refused."""
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"a pattern of at most {MAX_PATTERN} characters")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(
            exc.args[0], bytes) else str(exc)
        raise ValueError(f"not a regular expression RE2 accepts ({why}; backreferences and "
                         "lookaround are not supported)") from None


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` occurs in `text`."""
    return compile_pattern(pattern).search(text) is not None


def fullmatch(pattern: str, text: str) -> bool:
    """Whether `pattern` matches all of `text` (Alertmanager's anchored matchers)."""
    return compile_pattern(pattern).fullmatch(text) is not None
