"""Where a processed event's time goes: the embedded drain under cProfile.

The same records as `bench.e2e` (synthetic load, 10% NCCL timeouts of 50 jobs) are submitted
to an embedded runtime (no fsync, so the log's disk does not blur the picture) and drained
under cProfile. Printed: events/s without the profiler, then the top functions by own time
and by cumulative time, in microseconds per event, the figures to attach to a closing note.

    python -m bench.profile --events 50000 [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path


def _runtime(home: Path, n: int):  # type: ignore[no-untyped-def]
    from ingest.canonical import decode
    from jobtrail.config import Settings
    from jobtrail.learn import sample
    from jobtrail.runtime.embedded import EmbeddedRuntime

    runtime = EmbeddedRuntime(Settings(home=home, log_fsync="never"))
    text = "\n".join(json.dumps(r) for r in sample.synthetic(n))
    runtime.submit(decode(text, producer="bench", observed_at=datetime.now(UTC)))
    return runtime


def _table(stats: pstats.Stats, key: str, top: int, n: int) -> list[str]:
    rows = []
    entries = stats.stats  # type: ignore[attr-defined]
    order = 2 if key == "tottime" else 3
    for (path, line, name), values in sorted(entries.items(), key=lambda kv: -kv[1][order])[:top]:
        where = path.split("/site-packages/")[-1].split("/work/main/")[-1]
        rows.append(f"{values[order] * 1e6 / n:8.2f} µs  {values[1]:>9}  {name}  ({where}:{line})")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    n = opts.events
    with tempfile.TemporaryDirectory(prefix="jobtrail-profile-") as tmp:
        if opts.plain:  # chDB holds one engine per process: the unprofiled run is a child
            plain = _runtime(Path(tmp), n)
            started = time.perf_counter()
            stored = plain.drain().stored
            seconds = time.perf_counter() - started
            plain.close()
            print(f"drain without profiler: {stored} events in {seconds:.2f} s = "
                  f"{stored / seconds:,.0f} events/s ({seconds * 1e6 / stored:.1f} µs/event)")
            return
        subprocess.run([sys.executable, "-m", "bench.profile", "--plain", "--events", str(n)],
                       check=True, timeout=1200)
        profiled = _runtime(Path(tmp), n)
        profiler = cProfile.Profile()
        profiler.enable()
        profiled.drain()
        profiler.disable()
        profiled.close()
    stats = pstats.Stats(profiler)
    print(f"\ntop {opts.top} by own time (µs per event, calls, function):")
    print("\n".join(_table(stats, "tottime", opts.top, n)))
    print(f"\ntop {opts.top} by cumulative time:")
    print("\n".join(_table(stats, "cumtime", opts.top, n)))


if __name__ == "__main__":
    main()
