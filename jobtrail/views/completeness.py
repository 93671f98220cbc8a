"""Completeness as the people-facing surfaces show it: a line per attempt on the timeline
(`jobtrail timeline`), the caveat under an incident's cause (`jobtrail incident show`, the
MCP `incident` tool), from `jobtrail.store.completeness` and `processors.completeness`."""

from __future__ import annotations

from typing import Any

from jobtrail.store.completeness import as_json, attempt_completeness
from jobtrail.views.terminal import field
from processors.attempts import Attempt
from processors.completeness import caveat
from processors.topology import Topology


def of_attempts(store: Any, topology: Topology, attempts: list[Attempt],
                ) -> dict[int, dict[str, Any]]:
    """Each started attempt's assessment (`as_json`), by attempt number."""
    out = {}
    for a in attempts:
        assessed = attempt_completeness(store, topology, a)
        if assessed is not None:
            out[a.attempt] = as_json(*assessed) | {"caveat": caveat(assessed[1])}
    return out


def of_incident(store: Any, topology: Topology, found: dict[str, Any]) -> list[dict[str, Any]]:
    """The completeness of each attempt a (narrowed) incident holds as failed."""
    out = []
    for j in found.get("jobs", []):
        if j.get("role") != "failed":
            continue
        attempt = [a for a in store.attempts(j["project"], j["job_id"])
                   if a.attempt == j["attempt"]]
        for number, shown in of_attempts(store, topology, attempt).items():
            out.append({"project": j["project"], "job_id": j["job_id"], "attempt": number,
                        **{k: shown[k] for k in ("complete", "expected", "reported", "gaps",
                                                 "caveat")}})
    return out


def summary(shown: dict[str, Any]) -> str:
    """One line: what each kind expected and what reported, then the gaps."""
    parts = []
    for kind, expected in shown["expected"].items():
        got = shown["reported"].get(kind, 0)
        parts.append(f"{kind} {got}/{expected}" if expected else f"{kind} {got} (no pulse)")
    gaps = shown["gaps"]
    tail = "; complete" if not gaps else f"; {len(gaps)} gap(s): " + "; ".join(
        field(g["why"]) for g in gaps[:3]) + (" ..." if len(gaps) > 3 else "")
    return "sources: " + ", ".join(parts) + tail
