"""Round four of the adversarial probe (issue 40's spirit): the surfaces added since the last
probe, attacked as a careless operator, a hostile tenant and a curious insider would. Each
finding is reproduced here as the attack, then shown to hold; each test fails on the tree
before its fix."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ingest import hostlist
from ingest.adapters import Context, registry, run
from ingest.hostlist import HostlistError
from schemas.dead_letters import DeadLetter

CTX = Context(producer="probe", observed_at=datetime(2026, 12, 7, tzinfo=UTC), project="p",
              cluster="dev")

# --- hostlists: reading is linear, and stops at the first limit passed ----------------------


def test_a_hostlist_of_many_groups_is_read_in_one_pass_and_refused_early(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`a[1]` repeated 250,000 times (1 MB) is one name of 500,000 characters: reading it
    copied the rest of the text once per group (quadratic: 8 s for 1 MB, about half an hour
    for a 16 MB body), on the one parse thread every tenant's ingest waits for, long after
    the parse budget had answered 413. Now a name past MAX_NAME_CHARS is refused as soon as
    it is read: the number of ranges read is counted, not timed."""
    read: list[str] = []
    span = hostlist._span

    def counted(item: str, text: str, field: str) -> tuple[int, int, int]:
        read.append(item)
        return span(item, text, field)

    monkeypatch.setattr(hostlist, "_span", counted)
    with pytest.raises(HostlistError, match="MAX_NAME_CHARS"):
        hostlist.expand("a[1]" * 250_000, field="jobs[0].nodes")
    assert len(read) <= hostlist.MAX_NAME_CHARS
    read.clear()
    with pytest.raises(HostlistError, match="MAX_NAMES"):
        hostlist.expand("n[" + ",".join(["1"] * 1_000_000) + "]")
    assert len(read) == hostlist.MAX_NAMES + 1  # not the million items
    read.clear()
    with pytest.raises(HostlistError, match="MAX_INDICES"):
        hostlist.expand_indices(",".join(["0"] * 1_000_000), field="gres_detail")
    assert len(read) == hostlist.MAX_INDICES + 1
    # what Slurm writes still reads as before
    assert hostlist.expand("node-[001-003,010],gpu7,rack[1-2]-n[01-02]") == [
        "node-001", "node-002", "node-003", "node-010", "gpu7", "rack1-n01", "rack1-n02",
        "rack2-n01", "rack2-n02"]


def test_a_slurm_job_with_a_name_past_the_limit_is_one_dead_letter_naming_it() -> None:
    job = {"job_id": 7, "account": "p", "job_state": "RUNNING", "restart_cnt": 0,
           "submit_time": 1_765_000_000, "start_time": 1_765_000_100}
    body = json.dumps({"jobs": [{**job, "nodes": "a[1]" * 5_000},
                                {**job, "job_id": 8, "nodes": "n[1-2]"}]})
    out = run(registry()["slurm"], body, CTX)
    dead = [r for r in out if isinstance(r, DeadLetter)]
    assert len(dead) == 1 and dead[0].field == "jobs[0].nodes"
    assert "MAX_NAME_CHARS" in dead[0].reason
    started = [r for r in out if not isinstance(r, DeadLetter) and r.type == "job.started"]
    assert [e.job_id for e in started] == ["8"]


# --- whole-text patterns: no run of whitespace that crosses lines after a line start --------

_CROSSING = re.compile(r"(?:\^|\\n)(?:\(\?:)?(?:\\s[*+]|\(\?:\\S\*\[#\$\] \)\?\(\?:[^|]*\|\\s[*+])")
"""`^\\s*` or `\\n\\s+` in a MULTILINE pattern searched over a whole paste: `\\s` matches the
newline too, so a body of blank-ish lines is tried from every line start to every later one
(quadratic: 60,000 characters of ' \\n' took 5-11 s in kubectl's describe, scontrol's and
ibstat's sniffers, on the parse thread every tenant's ingest waits for)."""


def _whole_text_patterns() -> list[tuple[str, str]]:
    """Every `(?m)` pattern written in ingest/ (a literal, compiled or passed to re.search),
    and every module-level pattern compiled with re.MULTILINE."""
    import ast
    import importlib
    import pkgutil

    import ingest

    found: list[tuple[str, str]] = []
    for info in pkgutil.iter_modules(ingest.__path__):
        module = importlib.import_module(f"ingest.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern) and value.flags & re.MULTILINE \
                    and isinstance(value.pattern, str):
                found.append((f"ingest.{info.name}.{name}", value.pattern))
        assert module.__file__ is not None
        tree = ast.parse(Path(module.__file__).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and "(?m)" in node.value:
                found.append((f"ingest.{info.name}:{node.lineno}", node.value))
    return found


def test_no_whole_text_pattern_lets_a_line_start_run_of_whitespace_cross_lines() -> None:
    patterns = _whole_text_patterns()
    assert len(patterns) > 10  # the sniffers are found
    crossing = [name for name, source in patterns if _CROSSING.search(source)]
    assert crossing == [], "use [^\\S\\n] (blank but not a newline) after ^ in (?m) patterns"
    # and the check sees the form it forbids
    assert _CROSSING.search(r"(?m)^Events:\s*\n\s+Type")
    assert _CROSSING.search(r"(?m)^\s*JobId=")
