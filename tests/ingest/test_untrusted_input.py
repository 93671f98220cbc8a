"""Untrusted text costs time linear in its size (issue 25, finding 2): every pattern of every
adapter reads a long run of any character class once, every adapter (auto too) reads 20 KB
and 1 MB lines of each class within a generous time per MB, and an over-long line is cut at
its adapter's cap with the rest dead-lettered, never dropped.

A regression does not hang the suite: an interval timer interrupts the regex engine (it
checks signals) and the test fails naming the pattern or the adapter."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

import pytest

import ingest
from ingest.adapters import Context, registry, run
from ingest.base import MAX_LINE
from schemas.dead_letters import DeadLetter

PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
UNITS = ["7", "a", " ", "\t", PUNCT, "a ", "0 ", "a=", "1.", "1:", "a-", "0x", "a:1 ", "a,",
         "a/", "1/", "[1]", "a.b", "a@b", "aA1", "(", "\"", "1/1 [", "a_"]
FIXTURES = Path(__file__).parent / "fixtures"
CTX = Context(producer="test", observed_at=datetime(2026, 11, 30, tzinfo=UTC), project="p",
              job_id="j-1", node="node-1")
SECONDS_PER_MB = 20.0
"""CPU seconds, generous: measured 0.1-3.5 s per MB on a loaded 2-core machine; quadratic
is hours."""


class _Overran(BaseException):  # not an Exception: the adapter shell must not swallow it
    pass


class _Deadline:
    def __init__(self, seconds: float, what: str) -> None:
        self.seconds, self.what = seconds, what

    def _fire(self, signum: int, frame: FrameType | None) -> None:
        raise _Overran(self.what)

    def __enter__(self) -> None:
        self.previous = signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)


def _fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _patterns() -> Iterator[tuple[str, re.Pattern[str]]]:
    """Every compiled pattern at module level in `ingest/` (lists of them too: the redaction
    patterns, detect-secrets' among them)."""
    for info in pkgutil.iter_modules(ingest.__path__):
        module = importlib.import_module(f"ingest.{info.name}")
        for name, value in vars(module).items():
            for item in value if isinstance(value, list | tuple) else [value]:
                found = item[0] if isinstance(item, tuple) and item else item
                if isinstance(found, re.Pattern) and isinstance(found.pattern, str):
                    yield f"ingest.{info.name}.{name}", found


def _literals(pattern: re.Pattern[str]) -> list[str]:
    """Words the pattern spells: a run of a class after one is the classic trap."""
    return re.findall(r"[A-Za-z][A-Za-z _/:=.-]{2,}", pattern.pattern)[:2]


def test_no_pattern_reads_a_long_run_more_than_once() -> None:
    """16 KiB (the line cap) of each class, alone and after a word of the pattern: linear
    patterns take a few ms; one that restarts its greedy class at every position takes
    seconds, and fails here by name."""
    slow = []
    patterns = list(_patterns())
    assert len(patterns) > 100
    for name, pattern in patterns:
        for unit in UNITS + _literals(pattern):
            for prefix in ["", *_literals(pattern)]:
                text = prefix + _fill(unit, MAX_LINE)
                started = time.thread_time()  # CPU time: other processes' load does not count
                try:
                    with _Deadline(10.0, name):
                        for _ in pattern.finditer(text):
                            pass
                except _Overran:
                    slow.append(f"{name} on {prefix!r}+{unit!r}*: over 10 s")
                    break
                if time.thread_time() - started > 0.5:
                    slow.append(f"{name} on {prefix!r}+{unit!r}*: "
                                f"{time.thread_time() - started:.2f} s of CPU")
    assert not slow, slow


def _classes(size: int) -> Iterator[tuple[str, str]]:
    for unit in UNITS:
        yield f"{unit!r}*", _fill(unit, size)
    # prefixes of the lines adapters read, then a run: the shape that found the first bugs
    for path in sorted(FIXTURES.glob("*/*")):
        if path.suffix not in (".log", ".txt", ".prom"):
            continue
        for line in path.read_text().splitlines()[:3]:
            if len(line.strip()) >= 12:
                head = line.strip()[: len(line.strip()) * 2 // 3]
                yield f"{path.parent.name}:{head[:20]!r}+digits", head + _fill("9", size)
                yield f"{path.parent.name}:{head[:20]!r}*", _fill(head, size)


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_adapter_reads_long_lines_in_linear_time(name: str) -> None:
    adapter = registry()[name]
    cases = [(f"20KB {label}", text) for label, text in _classes(20_000)]
    cases += [(f"1MB {label}", _fill(unit, 1 << 20)) for label, unit in
              (("digits", "7"), ("words", "a:1 "), ("run", "2026-11-30_10:15:50.000+0000: 9"))]
    for label, text in cases:
        seconds = 1.0 + SECONDS_PER_MB * len(text) / (1 << 20)
        started = time.thread_time()  # CPU time: other processes' load does not count
        try:
            with _Deadline(3 * seconds, label):  # wall-clock guard: never hang the suite
                run(adapter, text, CTX)
        except _Overran:
            pytest.fail(f"{name} on a {label} line: over {3 * seconds:.0f} s")
        assert time.thread_time() - started < seconds, f"{name} on {label}"


@pytest.mark.parametrize("name", sorted(n for n, a in registry().items() if a.line_oriented))
def test_an_over_long_line_is_cut_at_the_cap_and_the_rest_dead_lettered(name: str) -> None:
    adapter = registry()[name]
    text = "x" * 100 + "\n" + "y" * (MAX_LINE + 5000) + "\n"
    out = run(adapter, text, CTX)
    cut = [d for d in out if isinstance(d, DeadLetter) and "line cap" in d.reason]
    assert len(cut) == 1, [getattr(d, "reason", d) for d in out]
    assert f"over the {MAX_LINE}-character line cap of {name}" in cut[0].reason
    assert "the 5000 characters after the cap are not read" in cut[0].reason
    assert cut[0].payload == "y" * 5000 and cut[0].event_ref.endswith("#line2")


def test_a_json_document_on_one_line_is_not_cut() -> None:
    """`sinfo --json` minified is a document, not a line: no cap applies to it."""
    sinfo = registry()["sinfo"]
    text = (FIXTURES / "sinfo" / "sinfo.json").read_text()
    padded = json.dumps({**json.loads(text), "padding": "p" * (MAX_LINE * 2)})
    out = run(sinfo, padded, CTX)
    assert not [d for d in out if isinstance(d, DeadLetter)]
    assert len(out) == len(run(sinfo, text, CTX))
