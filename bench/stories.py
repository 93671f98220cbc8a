"""Ground-truth failure stories: generated from the failure-mode library, delivered in many
orders and forms, scored against the truth.

A story (seeded) runs on the sample 64-node fat tree (16 nodes a rack, rail 0 on the odd
leaf at port pN, the GPUs' PCI addresses in its `gpu_pci`): a training job through one to
five attempts, each failure drawn from `bench/failure_modes.yaml` by the shares of Llama 3's
interruption table (a faulty GPU, HBM3, a software bug, a switch or cable, ...) with its
first signals, symptoms and recovery (requeued, or resubmitted by its owner; a fallback to
an older checkpoint when the newest save never finished or its load failed; a crash loop on
one bad GPU), other jobs, red herrings (a fault on an idle node, counter ticks, planned
work) and, in some stories, a second cluster with the same node names. The truth is what an
SRE would write down: class, entity, owner, impacted attempts, lost GPU-hours (charged on
one GPU time line per job, `bench.story_truth`), recovery.

Deliveries: `time` (canonical events in event order), `files` (canonical, one source after
another), `live` (canonical, sources with lags, the training log shipped every minute),
`raw` (the sources' own files, slurmctld and sacct/squeue JSON, kernel logs, training
output, Alertmanager, ibstat, in a shuffled order, read by the real adapters).

    python -m bench.stories --count 1000     # per delivery, per mode, per pattern; examples
"""

from __future__ import annotations

import argparse
import random
import time as wallclock
from collections.abc import Iterator
from datetime import datetime, timedelta

from bench import story_raw
from bench.story_gen import HORIZON, generate
from bench.story_model import GPU_BUS, PROJECT, T0, Story, Truth, node, port
from bench.story_modes import library
from bench.story_score import Answer, Report, Score, answer, score
from jobtrail.learn import sample
from processors.incidents.model import IncidentEvent
from processors.pipeline import Pipeline
from processors.topology import Topology
from schemas.events import Event
from schemas.topology import TopologyFile

__all__ = ["CLASSES", "DELIVERIES", "HORIZON", "PROJECT", "T0", "Answer", "Report", "Score",
           "Story", "Truth", "answer", "deliveries", "generate", "main", "node", "of_class",
           "port", "run", "score", "stories", "wiring"]

DELIVERIES = ("time", "files", "live", "raw")
CLASSES = tuple(sorted({m.truth.klass for m in library().modes}))
"""The causes the library's modes conclude (a story of each: `of_class`)."""


def of_class(seed: int, klass: str) -> Story:
    """A story of one failure whose cause is of class `klass` (the library's first mode of
    that class): what the order, eviction and same-instant tests replay."""
    mode = next(m.name for m in library().modes if m.truth.klass == klass)
    return generate(seed, mode, "single")
_WIRING: Topology | None = None


def topology() -> dict[str, object]:
    """The sample fat tree with the bench board's GPU PCI table."""
    spec = sample.topology()
    spec["gpu_pci"] = {f"0000:{bus}:00.0": gpu for gpu, bus in enumerate(GPU_BUS)}
    return spec


def wiring() -> Topology:
    global _WIRING
    if _WIRING is None:
        _WIRING = Topology.from_file(TopologyFile.model_validate(topology()))
    return _WIRING


def run(events: list[Event], horizon: timedelta = HORIZON) -> list[IncidentEvent]:
    """The incident log of `events` in their arrival order, one pipeline per cluster as the
    runtimes hold one detector per cluster (two clusters' `node-049` are two nodes)."""
    pipelines: dict[str, Pipeline] = {}
    log: list[IncidentEvent] = []
    for event in events:
        pipeline = pipelines.get(event.cluster)
        if pipeline is None:
            pipeline = pipelines[event.cluster] = Pipeline(timedelta(seconds=30), wiring(),
                                                           lateness=horizon)
        log.extend(pipeline.process([event]).incidents)
    return log


def deliveries(story: Story, seed: int = 0,
               which: tuple[str, ...] = DELIVERIES) -> dict[str, list[Event]]:
    """Arrival orders (and forms) of the same story."""
    rng = random.Random(seed * 7919 + story.seed)
    out: dict[str, list[Event]] = {}
    sources = sorted({s for s, _ in story.events})
    order = rng.sample(sources, len(sources))
    lag = {s: timedelta(seconds=rng.uniform(0, 120)) for s in sources}
    if "time" in which:
        out["time"] = [e for _, e in story.events]
    if "files" in which:
        out["files"] = [e for s in order for src, e in story.events if src == s]
    if "live" in which:
        def arrival(source: str, event: Event) -> tuple[datetime, str]:
            if source == "training":  # shipped every minute
                base = event.time.replace(second=0, microsecond=0) + timedelta(minutes=1)
                return base + lag[source], event.id
            return event.time + lag[source], event.id
        out["live"] = [e for _, e in sorted(story.events, key=lambda se: arrival(*se))]
    if "raw" in which:
        out["raw"] = story_raw.read(story, story_raw.shuffled(story, seed)).events
    return out


def stories(count: int, first_seed: int = 0, cover: int = 1) -> Iterator[Story]:
    """`count` stories from `first_seed`: the first `cover` rounds force each mode once
    (so every mode is seen), the rest draw modes by their share."""
    modes = [m.name for m in library().modes]
    for i in range(count):
        forced = modes[i % len(modes)] if i < cover * len(modes) else None
        yield generate(first_seed + i, forced)


def show(seed: int, which: tuple[str, ...] = DELIVERIES, mode: str = "") -> str:
    """One story (`mode`: its first failure's, as `stories` forces it): its attempts, its
    truth, and each delivery's conclusions."""
    story = generate(seed, mode or None)
    lines = [f"seed {seed}: {story.pattern}, first failure {story.mode}; herrings "
             f"{story.herrings}"]
    for r in story.runs:
        lines.append(f"  {r.cluster} {r.key} nodes {r.nodes} {r.start:%H:%M:%S}-"
                     f"{r.end:%H:%M:%S} {r.outcome} symptom "
                     f"{r.symptom and f'{r.symptom:%H:%M:%S}'} restored {r.restored}"
                     + (f" (load of {r.restore_failed} failed)" if r.restore_failed else ""))
    lines += ["truth:", *(f"  {t}" for t in story.truth)]
    for name, events in deliveries(story, 0, which).items():
        lines.append(f"{name} ({len(events)} events):")
        lines += [f"  {a}" for a in answer(run(events))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", "--stories", type=int, default=1000, dest="count")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cover", type=int, default=1,
                        help="rounds that force every mode once before drawing by share")
    parser.add_argument("--deliveries", default=",".join(DELIVERIES))
    parser.add_argument("--mode", default="", help="only stories whose first failure is this "
                        "(with --show: force it, as the first round of `stories` does)")
    parser.add_argument("--show", type=int, default=None, metavar="SEED",
                        help="one story: its truth and what each delivery concluded")
    args = parser.parse_args(argv)
    which = tuple(d for d in args.deliveries.split(",") if d)
    if args.show is not None:
        print(show(args.show, which, args.mode))
        return
    report = Report()
    began = wallclock.perf_counter()
    for i, story in enumerate(stories(args.count, args.seed, args.cover)):
        if args.mode and story.mode != args.mode:
            continue
        report.add(story, {n: answer(run(e)) for n, e in deliveries(story, 0, which).items()})
        if (i + 1) % 50 == 0:
            print(f"... {i + 1} stories, {wallclock.perf_counter() - began:.0f} s", flush=True)
    print(report.text())
    print(f"\n{wallclock.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
