"""A storm: every rank of a large cluster's jobs times out at once (issue 45's storm goal:
100,000 events queryable and the incident open within 5 s).

A fat tree of `--nodes` nodes (8 GPUs each) runs jobs of 8 nodes; spine-01 goes down and,
ten minutes later, each rank of every job logs its NCCL watchdog timeout within nine
seconds. The first `--events` timeouts (in event-time order) go through the shared pipeline
(processors only, batches of 5,000, as the runtimes give them). The baseline in the same run
is as many progress lines of the same jobs (events that join no incident). Printed: events/s
both ways, their ratio, and when (from the storm's first batch) the incident was opened.

    python -m bench.storm --nodes 12500 --events 5000
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 12, 1, 8, tzinfo=UTC)


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def records(nodes: int, events: int, storm: bool) -> tuple[list[dict[str, Any]],
                                                             list[dict[str, Any]]]:
    """(the jobs' starts, the storm's first `events` timeouts or as many progress lines)."""
    jobs = nodes // 8
    starts = [{"id": f"s{j}", "type": "job.started", "time": _iso(T0), "project": f"p{j % 20}",
               "cluster": "storm", "job_id": f"j{j}", "attempt": 1,
               "attributes": {"nodes": [f"node-{j * 8 + k + 1:03d}" for k in range(8)],
                              "gpus": 64}} for j in range(jobs)]
    down = T0 + timedelta(hours=1)
    out: list[tuple[datetime, dict[str, Any]]] = []
    if storm:
        out.append((down, {"id": "spine", "type": "network.port_down", "time": _iso(down),
                           "cluster": "storm", "source": "network", "severity": "critical",
                           "scope": "switch", "entity": "spine-01",
                           "attributes": {"switch": "spine-01"}}))
    for j in range(jobs):
        for r in range(64):
            at = down + timedelta(seconds=600, milliseconds=(j * 64 + r) % 9000)
            base = {"id": f"t{j}-{r}", "source": "job", "time": _iso(at), "project": f"p{j % 20}",
                    "cluster": "storm", "job_id": f"j{j}", "attempt": 1,
                    "node": f"node-{j * 8 + r // 8 + 1:03d}"}
            out.append((at, {**base, "type": "comm.nccl_timeout", "attributes": {
                "rank": r, "seq_num": 100, "op_type": "ALLREDUCE", "timeout_ms": 600000}}
                if storm else {**base, "type": "job.step", "attributes": {"step": 100 + r}}))
    out.sort(key=lambda te: (te[0], te[1]["id"]))
    return starts, [r for _, r in out[:events]]


def run(nodes: int, events: int, storm: bool) -> dict[str, Any]:
    from ingest.canonical import decode
    from processors.incidents.model import fold
    from processors.pipeline import Pipeline
    from processors.topology import Topology
    from schemas.events import Event
    from schemas.topology import TopologyFile, fat_tree

    wiring = Topology.from_file(TopologyFile.model_validate(fat_tree(nodes, cluster="storm")))
    starts, load = records(nodes, events, storm)
    seen = datetime.now(UTC)
    before = [e for e in decode("\n".join(json.dumps(r) for r in starts), producer="b",
                                observed_at=seen) if isinstance(e, Event)]
    evs = [e for e in decode("\n".join(json.dumps(r) for r in load), producer="b",
                             observed_at=seen) if isinstance(e, Event)]
    pipeline = Pipeline(timedelta(seconds=30), wiring)
    for i in range(0, len(before), 5000):
        pipeline.process(before[i:i + 5000])
    began = time.perf_counter()
    opened, log = None, []
    for i in range(0, len(evs), 5000):
        out = pipeline.process(evs[i:i + 5000])
        log += out.incidents
        if opened is None and any(e.kind == "opened" for e in out.incidents):
            opened = time.perf_counter() - began
    seconds = time.perf_counter() - began
    return {"events": len(evs), "seconds": round(seconds, 2),
            "events_per_s": round(len(evs) / seconds), "incident_events": len(log),
            "opened_after_s": None if opened is None else round(opened, 2),
            "incidents": sorted((i.klass, i.entity, len(i.jobs))
                                for i in fold(log).values() if not i.withdrawn)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=12_500)
    parser.add_argument("--events", type=int, default=5_000)
    opts = parser.parse_args()
    base = run(opts.nodes, opts.events, storm=False)
    storm = run(opts.nodes, opts.events, storm=True)
    print(json.dumps({"nodes": opts.nodes, "baseline_progress": base, "storm": storm,
                      "ratio_storm_to_progress": round(storm["events_per_s"]
                                                       / base["events_per_s"], 4),
                      "storm_100k_seconds_at_this_rate": round(
                          100_000 / storm["events_per_s"], 1)}, indent=2))


if __name__ == "__main__":
    main()
