"""Attribution cost: events/s and memory of the pipeline with a large fabric, and at 2x.

Scale 1: 4,000 nodes (2 rails, 32 nodes per leaf), 2,000 concurrent 2-node attempts, 32
filesystems (each attempt mounts one), 100,000 infrastructure events: 60 % node/GPU events,
30 % switch-port events, 10 % storage-target events. Scale 2 doubles nodes and attempts with
the same event count. Each scale runs in its own process so its peak RSS is its own.

    python -m bench.attribution
"""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def run(scale: int, n_events: int = 100_000) -> dict[str, float]:
    from processors.pipeline import Pipeline
    from processors.topology import Topology
    from schemas.events import Event, Scope, Source
    from schemas.topology import TopologyFile, fat_tree

    nodes = 4000 * scale
    attempts = 2000 * scale
    spec = fat_tree(nodes, rails=2, nodes_per_leaf=32)
    spec["filesystems"] = {f"fs-{i:02d}": {"targets": [f"fs-{i:02d}-OST{t}" for t in range(8)]}
                           for i in range(32)}
    topology = Topology.from_file(TopologyFile.model_validate(spec))
    pipeline = Pipeline(topology=topology, lateness=timedelta(hours=2))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    starts = [
        Event(id=f"s{i}", type="job.started", source=Source.scheduler, time=T0, project="p",
              cluster="c", job_id=f"j{i}", attempt=1,
              attributes={"nodes": [f"node-{2 * i + 1:03d}", f"node-{2 * i + 2:03d}"],
                          "mounts": [f"fs-{i % 32:02d}:/data"]})
        for i in range(attempts)]
    pipeline.process(starts)
    rng = random.Random(42)
    leaves = [s for s, v in spec["switches"].items() if v["tier"] == "leaf"]
    events = []
    for i in range(n_events):
        t = T0 + timedelta(seconds=1 + i * 0.01)
        roll = rng.random()
        if roll < 0.6:
            node = f"node-{rng.randrange(1, nodes + 1):03d}"
            events.append(Event(id=f"e{i}", type="node.ecc", source=Source.node, time=t,
                                cluster="c", scope=Scope.gpu, entity=f"{node}/gpu0", node=node))
        elif roll < 0.9:
            leaf = rng.choice(leaves)
            events.append(Event(id=f"e{i}", type="network.link_errors", source=Source.network,
                                time=t, cluster="c", scope=Scope.port,
                                entity=f"{leaf}/p{rng.randrange(1, 33)}"))
        else:
            fs = rng.randrange(32)
            events.append(Event(id=f"e{i}", type="storage.latency", source=Source.storage,
                                time=t, cluster="c", scope=Scope.target,
                                entity=f"fs-{fs:02d}-OST{rng.randrange(8)}",
                                attributes={"latency_ms": 900.0}))
    rows = 0
    started = time.perf_counter()
    for chunk in range(0, n_events, 5000):
        rows += len(pipeline.process(events[chunk:chunk + 5000]).timeline)
    elapsed = time.perf_counter() - started
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"scale": scale, "nodes": nodes, "attempts": attempts, "events": n_events,
            "timeline_rows": rows, "events_per_s": round(n_events / elapsed),
            "peak_rss_mb": round(rss_after / 1024), "state_rss_mb": round(
                (rss_after - rss_before) / 1024)}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(run(int(sys.argv[2]))))
        return
    results = []
    for scale in (1, 2):
        out = subprocess.run([sys.executable, "-m", "bench.attribution", "--child", str(scale)],
                             capture_output=True, text=True, check=True, timeout=1800)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    one, two = results
    print(json.dumps({
        "events_per_s_ratio_2x_to_1x": round(two["events_per_s"] / one["events_per_s"], 3),
        "state_memory_ratio_2x_to_1x": round(two["state_rss_mb"] / max(1, one["state_rss_mb"]),
                                             3)}))


if __name__ == "__main__":
    main()
