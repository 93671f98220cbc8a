"""The facts `processors.completeness` judges, read from the store for one attempt.

Two grouped reads, both bound to the attempt's project: its timeline rows (a prefix scan of
`job_timeline`) grouped by stream, and each source's cluster-wide stream over the hour before
the attempt's end (a time-range scan of `events` in its cluster's ORDER BY prefix), counting
only the cluster's own events and the attempt's project's: another tenant's jobs never
shape the answer. Nothing is kept at ingest: the two grouped reads cost 12-30 ms per attempt
on the demo's store (docs/agents.md); a projection fed by the sink is the step to take if
they grow slow on big stores.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from processors.attempts import Attempt
from processors.completeness import GAP_S, SPANS, Assessment, Facts, Heard, assess
from processors.timeline import filesystem_of
from processors.topology import Topology

_STREAMS = """
SELECT source, relation, node, entity, count() AS n, min(time) AS first, max(time) AS last,
       argMax(event_id, time) AS last_event
FROM job_timeline FINAL
WHERE project = {project:String} AND job_id = {job:String} AND attempt = {attempt:UInt32}
GROUP BY source, relation, node, entity
"""

_CLUSTER = """
SELECT kind, uniqExact(id) AS n, min(time) AS first, max(time) AS last,
       argMax(id, time) AS last_event,
       groupUniqArray(intDiv(dateDiff('millisecond', time, {hi:DateTime64(3, 'UTC')}),
                             {span_ms:Int64})) AS buckets
FROM (
    SELECT if(startsWith(producer, 'alertmanager'), 'alerts', source) AS kind, id, time
    FROM events
    WHERE cluster = {cluster:String} AND (project = '' OR project = {project:String})
      AND time >= {lo:DateTime64(3, 'UTC')} AND time <= {hi:DateTime64(3, 'UTC')}
)
GROUP BY kind
"""

_NEWEST = "SELECT max(time) FROM events WHERE cluster = {cluster:String}"

_KIND = {"scheduler": "scheduler", "node": "node log", "network": "fabric",
         "storage": "storage"}
_CLUSTER_KIND = {"scheduler": "scheduler", "job": "rank log", "node": "node log",
                 "network": "fabric", "storage": "storage", "alerts": "alerts"}


def _stream(row: dict[str, Any], topology: Topology) -> tuple[str, str] | None:
    source, entity, node = row["source"], row["entity"] or "", row["node"] or ""
    if source == "scheduler":
        return ("scheduler", "") if row["relation"] == "self" else None
    if source == "job":
        return ("rank log", entity) if entity.startswith("rank-") else None
    if source == "node":
        return ("node log", node or entity.split("/")[0])
    if source == "storage":
        return ("storage", topology.filesystem_of_target(entity) or entity.split(":")[0])
    kind = _KIND.get(source)
    return (kind, entity.split("/")[0]) if kind else None


def _merge(into: dict[tuple[str, str], Heard], key: tuple[str, str], row: dict[str, Any],
           source: str) -> None:
    held = into.get(key)
    if held is None:
        into[key] = Heard(key[0], key[1], int(row["n"]), row["first"], row["last"],
                          str(row["last_event"]), source)
        return
    newer = row["last"] > (held.last or row["last"])
    into[key] = Heard(key[0], key[1], held.count + int(row["n"]),
                      min(x for x in (held.first, row["first"]) if x is not None),
                      row["last"] if newer else held.last,
                      str(row["last_event"]) if newer else held.last_event, source)


def facts(store: Any, topology: Topology, attempt: Attempt, *,
          gap_s: float = GAP_S) -> Facts | None:
    """What the store holds about `attempt`'s sources (None when it never started)."""
    start = attempt.started_at
    if start is None:
        return None
    rows = store._dicts(_STREAMS, project=attempt.project, job=attempt.job_id,
                        attempt=attempt.attempt)
    end = attempt.ended_at
    if end is None:  # still running: as far as the cluster's newest event
        newest = [r[0] if r[0].tzinfo else r[0].replace(tzinfo=UTC)
                  for r in store._q(_NEWEST, cluster=attempt.cluster).result_rows
                  if isinstance(r[0], datetime)]
        end = max([start, *newest])
    heard: dict[tuple[str, str], Heard] = {}
    for row in rows:
        key = _stream(row, topology)
        if key is not None:
            _merge(heard, key, row, row["source"])
    cluster = [Heard(_CLUSTER_KIND.get(r["kind"], r["kind"]), "", int(r["n"]), r["first"],
                     r["last"], str(r["last_event"]), r["kind"],
                     frozenset(int(b) for b in r["buckets"]))
               for r in store._dicts(_CLUSTER, cluster=attempt.cluster,
                                     project=attempt.project,
                                     lo=end - timedelta(seconds=gap_s * SPANS), hi=end,
                                     span_ms=int(gap_s * 1000))]
    named = [("fabric", s) for s in sorted({s for n in attempt.nodes
                                            for s in topology.switches_of(n, start)})]
    named += [("storage", fs) for fs in sorted({filesystem_of(m) for m in attempt.mounts})]
    placed = [k if k.startswith("rank-") else f"rank-{k}" for k, _ in attempt.ranks]
    return Facts(start=start, end=end, nodes=list(attempt.nodes), gpus=attempt.gpus,
                 ranks=placed, heard=list(heard.values()), cluster=cluster, named=named,
                 gap_s=gap_s)


def attempt_completeness(store: Any, topology: Topology, attempt: Attempt, *,
                         gap_s: float = GAP_S) -> tuple[Facts, Assessment] | None:
    found = facts(store, topology, attempt, gap_s=gap_s)
    return None if found is None else (found, assess(found))


def as_json(f: Facts, a: Assessment) -> dict[str, Any]:
    """An assessment as the CLI, the MCP tools and the tests read it."""
    def stream(s: Any) -> dict[str, Any]:
        h = s.heard
        return {"kind": s.kind, "key": s.key, "status": s.status, "events": h.count,
                "first": h.first, "last": h.last, "last_event": h.last_event, "why": s.why}

    return {"window": {"start": f.start, "end": f.end}, "gap_s": f.gap_s,
            "complete": a.complete,
            "expected": {k: len(v) for k, v in a.expected.items()},
            "reported": {k: sum(1 for s in a.streams if s.kind == k and s.status in (
                "reported", "stopped", "sparse")) for k in a.expected},
            "gaps": [stream(g) for g in a.gaps],
            "streams": [stream(s) for s in a.streams]}
