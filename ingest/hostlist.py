"""Slurm hostlists (`node-[001-003,010],gpu7`, `rack[1-2]-n[01-04]`) and index ranges
(`IDX:0-3,6`, `123_[0-15]`), expanded within limits.

A hostlist is text a tenant, a scheduler or a pasted file controls: `n[0-99999999]` is 20
characters and a hundred million names (3 GB before this module counted first). Every range is
counted before anything is generated, and a list that would name more than `MAX_NAMES`, or
spell more than `MAX_CHARS` characters, is refused with `HostlistError`, which names the field
and the limit (a `ParseError`, so an adapter dead-letters the one record; a `ValueError`, so a
command line prints it). Inside `budget()` (one payload, one topology file, one collector poll)
all the lists expanded together share `PAYLOAD_NAMES`, so many lists of allowed size cannot add
up to the same blow-up. The largest machines listed today have about 12,000 nodes a partition;
the limits leave a wide margin above that.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from ingest.canonical import ParseError

MAX_NAMES = 100_000
"""Names one hostlist may expand to."""
MAX_CHARS = 4_000_000
"""Characters the names of one hostlist may add up to."""
PAYLOAD_NAMES = 1_000_000
"""Names all the hostlists of one payload (file, request, poll) may expand to together."""
MAX_INDICES = 100_000
"""Numbers one index range (GPU indices, array task ids) may expand to."""
_DIGITS = 18  # a bound in a range has at most this many digits (int64, and no 4300-digit int())

_BUDGET: ContextVar[list[int] | None] = ContextVar("hostlist_budget", default=None)


class HostlistError(ParseError, ValueError):
    """A hostlist or index range refused: malformed, or past a limit (named in the reason)."""


@contextmanager
def budget(names: int = PAYLOAD_NAMES) -> Iterator[None]:
    """Let the hostlists expanded inside share `names` in all (an outer budget wins)."""
    if _BUDGET.get() is not None:
        yield
        return
    token = _BUDGET.set([names])
    try:
        yield
    finally:
        _BUDGET.reset(token)


def expand(text: str, *, field: str = "nodes") -> list[str]:
    """`node-[001-003,010],gpu7` -> node-001, node-002, node-003, node-010, gpu7; padding is
    the width of a range's first bound, as Slurm writes it."""
    parts = [_groups(part, text, field) for part in _split(text or "", field)]
    count = chars = 0
    for groups in parts:  # counted from the bounds: nothing is spelled out before the check
        size = math.prod(_size(g) for g in groups)
        count += size
        chars += size * sum(_width(g) for g in groups)
        _charge(count, chars, text, field, check_budget=False)
    _charge(count, chars, text, field)
    out: list[str] = []
    for groups in parts:
        pieces = [[g] if isinstance(g, str) else
                  [f"{n:0{width}d}" for lo, hi, width in g for n in range(lo, hi + 1)]
                  for g in groups]
        out.extend("".join(combo) for combo in itertools.product(*pieces))
    return [name for name in out if name]


def expand_indices(text: str, *, field: str = "indices",
                   limit: int = MAX_INDICES) -> list[int]:
    """`0-3,6` -> 0, 1, 2, 3, 6 (GPU indices, array task ids), at most `limit` of them."""
    spans = [_span(item, text, field) for item in (text or "").split(",") if item.strip()]
    count = sum(hi - lo + 1 for lo, hi, _ in spans)
    if count > limit:
        raise HostlistError(field, f"index range {_quote(text)} names {count:,} numbers; the "
                                   f"limit is {limit:,} (ingest.hostlist.MAX_INDICES)")
    return [n for lo, hi, _ in spans for n in range(lo, hi + 1)]


def _split(text: str, field: str) -> list[str]:
    """The comma-separated parts of a hostlist, commas inside brackets kept."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(field, f"hostlist {_quote(text)}: nested brackets")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(field, f"hostlist {_quote(text)}: ']' without '['")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(field, f"hostlist {_quote(text)}: '[' without ']'")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


_Group = str | list[tuple[int, int, int]]


def _groups(part: str, text: str, field: str) -> list[_Group]:
    """A part as literal pieces and bracket groups (each a list of (first, last, width))."""
    groups: list[_Group] = []
    rest = part
    while "[" in rest:
        pre, _, tail = rest.partition("[")
        inside, _, rest = tail.partition("]")
        if pre:
            groups.append(pre)
        spans = [_span(item, text, field) for item in inside.split(",") if item.strip()]
        if not spans:
            raise HostlistError(field, f"hostlist {_quote(text)}: an empty '[]'")
        groups.append(spans)
    if rest:
        groups.append(rest)
    return groups


def _size(group: _Group) -> int:
    return 1 if isinstance(group, str) else sum(hi - lo + 1 for lo, hi, _ in group)


def _width(group: _Group) -> int:
    """The longest name piece a group spells."""
    return len(group) if isinstance(group, str) else \
        max(max(width, len(str(hi))) for _, hi, width in group)


def _span(item: str, text: str, field: str) -> tuple[int, int, int]:
    lo, dash, hi = item.strip().partition("-")
    hi = hi if dash else lo
    if not (lo.isdigit() and hi.isdigit()) or len(lo) > _DIGITS or len(hi) > _DIGITS:
        raise HostlistError(field, f"hostlist {_quote(text)}: {_quote(item)} is not a number "
                                   f"or a range of numbers (at most {_DIGITS} digits)")
    first, last = int(lo), int(hi)
    if last < first:
        raise HostlistError(field, f"hostlist {_quote(text)}: the range {_quote(item)} runs "
                                   "backwards")
    return first, last, len(lo)


def _charge(count: int, chars: int, text: str, field: str, *, check_budget: bool = True) -> None:
    if count > MAX_NAMES:
        raise HostlistError(field, f"hostlist {_quote(text)} names {count:,} nodes; the limit "
                                   f"is {MAX_NAMES:,} per hostlist (ingest.hostlist.MAX_NAMES)")
    if chars > MAX_CHARS:
        raise HostlistError(field, f"hostlist {_quote(text)} spells {chars:,} characters; the "
                                   f"limit is {MAX_CHARS:,} (ingest.hostlist.MAX_CHARS)")
    left = _BUDGET.get()
    if check_budget and left is not None:
        if count > left[0]:
            raise HostlistError(field, f"hostlist {_quote(text)} would bring this input's "
                                       f"hostlists past {PAYLOAD_NAMES:,} names in all "
                                       "(ingest.hostlist.PAYLOAD_NAMES)")
        left[0] -= count


def _quote(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")
