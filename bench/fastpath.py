"""The detector's fast path (issue 45's first lever): the shared pipeline over the documented
fleet mix (`bench.fleet`), with `Pipeline.fast` on and against it off (the baseline, every
event observed), in the same run, rounds interleaved.

Only the processors are timed (no decoding, no store): `Pipeline.process` in batches of the
worker's size, with the JSON each event came in given as the runtimes give it (the lateness
journal keeps it). Printed per path: CPU-µs an event (`time.process_time`, what other work on
a shared machine moves least), events per CPU-second, the ratio fast / slow, the share of
events the fast path passes by, and whether both gave the same incident log (they must:
`tests/processors/test_fast_path.py`).

    python -m bench.fastpath --events 40000 --nodes 2000
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta
from typing import Any

BATCH = 5000


def _load(n: int, nodes: int, seed: int) -> tuple[list[Any], dict[str, bytes]]:
    from bench.fleet import T0, FleetLoad
    from ingest.canonical import decode
    from schemas.events import Event

    records = FleetLoad(nodes, seed).records(n)
    raw = {r["id"]: json.dumps(r).encode() for r in records}
    text = "\n".join(json.dumps(r) for r in records)
    events = [e for e in decode(text, producer="bench", observed_at=T0) if isinstance(e, Event)]
    return events, raw


def once(events: list[Any], raw: dict[str, bytes], fast: bool) -> tuple[float, list[Any]]:
    """CPU seconds of the pipeline over `events`, and the incident log it wrote."""
    from processors.pipeline import Pipeline

    pipeline = Pipeline(timedelta(seconds=30), lateness=timedelta(minutes=10))
    pipeline.fast = fast
    log: list[Any] = []
    start = time.process_time()
    for i in range(0, len(events), BATCH):
        batch = events[i:i + BATCH]
        log += pipeline.process(batch, {e.id: raw[e.id] for e in batch}).incidents
    return time.process_time() - start, log


def main(argv: list[str] | None = None) -> None:
    from processors.incidents.inert import inert
    from processors.incidents.rules import load_rules

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=40_000)
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=45)
    args = p.parse_args(argv)
    if args.events < 1 or args.nodes < 8 or args.rounds < 1:
        p.error("--events >= 1, --nodes >= 8, --rounds >= 1")
    events, raw = _load(args.events, args.nodes, args.seed)
    rules = load_rules()
    passed = sum(inert(rules, e) for e in events)
    best: dict[bool, float] = {}
    logs: dict[bool, list[Any]] = {}
    for _ in range(args.rounds):
        for fast in (False, True):
            cpu, log = once(events, raw, fast)
            best[fast] = min(best.get(fast, cpu), cpu)
            logs[fast] = log
    same = [e.model_dump(mode="json") for e in logs[True]] == \
        [e.model_dump(mode="json") for e in logs[False]]
    n = len(events)
    print(f"fleet mix: {n} events, {args.nodes} nodes; inert (passed by): {passed} "
          f"({100 * passed / n:.1f} %); incident events: {len(logs[True])}")
    for fast in (False, True):
        name = "fast path" if fast else "slow path (baseline)"
        print(f"{name:22} {best[fast] / n * 1e6:7.1f} CPU-µs/event  "
              f"{n / best[fast]:9,.0f} events/CPU-s  (best of {args.rounds})")
    print(f"fast / slow: {best[False] / best[True]:.2f}x events/CPU-s; "
          f"same incident log: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit("the fast path wrote another incident log")


if __name__ == "__main__":
    main()
