"""The storage floor: what the embedded runner's statements cost the engine alone.

`bench.e2e` compares the embedded runner with a raw chDB insert of the same events into
`events`. The runner stores more than that (the timeline, the dedup index, the incident log)
and asks the dedup index before each batch. This bench separates the engine's share from
Python's, in three runs, each in its own process (chDB holds one engine per process):

- raw: the same canonical rows into `events` (JSONEachRow, batches of 5,000), as `bench.e2e`;
- embedded: the embedded runner draining the same records, with every statement it sends
  to the engine recorded (SQL, blocks and settings, as sent);
- floor: those recorded statements replayed, in order, into a fresh store, and timed. No
  decoding, no processing, no row building: the engine's work for the same stored result.

Printed: µs per event of each, and the ceiling the floor sets on the ratio `bench.e2e`
reports (raw / floor: the embedded ratio if Python cost nothing).

    python -m bench.floor --events 100000
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
_METHODS = ("raw_insert", "insert", "query", "command")
_TABLES = ("events", "event_ids", "job_timeline", "job_attempts", "incident_log", "incidents",
           "incident_evidence", "incident_jobs", "dead_letters")


def _counts(store: Any) -> dict[str, int]:
    """Rows per table: the replay must leave what the runner left."""
    return {t: int(store.client.query(f"SELECT count() FROM {t}").result_rows[0][0])
            for t in _TABLES}


def _records(n: int) -> list[Any]:
    from ingest.canonical import decode
    from jobtrail.learn import sample

    text = "\n".join(json.dumps(r) for r in sample.synthetic(n))
    return list(decode(text, producer="bench", observed_at=datetime.now(UTC)))


def raw(home: Path, n: int) -> dict[str, Any]:
    from bench.e2e import raw_chdb

    return raw_chdb(home, n)


def embedded(home: Path, n: int, recording: Path) -> dict[str, Any]:
    """The runner's drain, timed, with its statements recorded to `recording`."""
    from jobtrail.config import Settings
    from jobtrail.runtime.embedded import EmbeddedRuntime

    runtime = EmbeddedRuntime(Settings(home=home, log_fsync="never"))
    client = runtime.sink.store.client
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    for name in _METHODS:
        method = getattr(client, name)

        def record(*args: Any, _name: str = name, _method: Any = method,
                   **kwargs: Any) -> Any:
            calls.append((_name, args, kwargs))
            return _method(*args, **kwargs)

        setattr(client, name, record)
    runtime.submit(_records(n))
    started, cpu = time.monotonic(), time.process_time()
    stored = runtime.drain().stored
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu
    runtime.close()
    recording.write_bytes(pickle.dumps(calls))
    return {"events": stored, "seconds": seconds, "cpu": cpu, "statements": len(calls),
            "rows": _counts(runtime.sink.store)}


def floor(home: Path, recording: Path) -> dict[str, Any]:
    """The recorded statements into a fresh store (migrated first, untimed)."""
    from jobtrail.store import Store

    store = Store.connect(f"chdb://{home / 'chdb'}")
    store.migrate()
    calls = pickle.loads(recording.read_bytes())  # written by this bench, just now
    kinds: dict[str, float] = {}
    started, cpu = time.monotonic(), time.process_time()
    for name, args, kwargs in calls:
        at = time.perf_counter()
        getattr(store.client, name)(*args, **kwargs)
        sql = str(args[0] if args else kwargs.get("table") or kwargs.get("query") or "")
        kind = f"{name} {sql.split('(')[0].split(' WHERE ')[0][:60]}"
        kinds[kind] = kinds.get(kind, 0.0) + time.perf_counter() - at
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu
    return {"seconds": seconds, "cpu": cpu, "statements": len(calls), "kinds": kinds,
            "rows": _counts(store)}


def _child(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "bench.floor", "--child", *args],
                         capture_output=True, text=True, cwd=HERE, timeout=1200, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{args[0]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def run(n: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(raw, embedded, floor) results for `n` generated events."""
    with tempfile.TemporaryDirectory(prefix="jobtrail-floor-") as tmp:
        work = Path(tmp)
        recording = work / "statements.pickle"
        base = _child("raw", str(work / "raw"), "--events", str(n))
        emb = _child("embedded", str(work / "embedded"), str(recording), "--events", str(n))
        low = _child("floor", str(work / "floor"), str(recording), "--events", str(n))
    return base, emb, low


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        kind, home, *rest = opts.child
        result = (raw(Path(home), opts.events) if kind == "raw" else
                  embedded(Path(home), opts.events, Path(rest[0])) if kind == "embedded" else
                  floor(Path(home), Path(rest[0])))
        print(json.dumps(result))
        return
    n = opts.events
    base, emb, low = run(n)
    stored = emb["events"]
    if low["rows"] != emb["rows"]:
        print(f"the replay left other rows than the runner: {low['rows']} != {emb['rows']}")

    def per(result: dict[str, Any], key: str, count: int) -> float:
        return float(result[key]) * 1e6 / count

    print(f"{n} events generated, {stored} stored by the runner; "
          f"{emb['statements']} engine statements")
    print("| path | wall µs/event | CPU µs/event |\n|---|---|---|")
    for name, result, count in (("raw chDB insert into `events`", base, base["events"]),
                                ("embedded runner", emb, stored),
                                ("floor: the runner's statements alone", low, stored)):
        print(f"| {name} | {per(result, 'seconds', count):.1f} | "
              f"{per(result, 'cpu', count):.1f} |")
    raw_us, floor_us = per(base, "seconds", base["events"]), per(low, "seconds", stored)
    emb_us = per(emb, "seconds", stored)
    print(f"\nembedded / raw: {raw_us / emb_us:.3f}; ceiling with no Python at all "
          f"(raw / floor): {raw_us / floor_us:.3f}")
    print(f"Python's share of the runner: {emb_us - floor_us:.1f} µs/event; for a ratio of "
          f"0.3 the whole runner must take {raw_us / 0.3:.1f} µs/event, leaving Python "
          f"{raw_us / 0.3 - floor_us:.1f}")
    print("\nthe floor by statement kind (wall µs/event):")
    for kind, seconds in sorted(low["kinds"].items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {seconds * 1e6 / stored:6.2f}  {kind}")


if __name__ == "__main__":
    main()
