"""Read paths at size: a chDB store with 100 M generated timeline rows.

Generated inside the engine (`INSERT ... SELECT FROM numbers()`), deterministic, with the
spread of a real fleet: 20 projects, `rows / 500` jobs whose sizes are skewed (a few jobs
hold tens of thousands of rows, most a few hundred), 1-3 attempts, jobs started over 30 days
and running up to a day, 4,000 nodes, 256 leaf switches, 8 filesystems; `events` gets a
quarter as many rows (the infrastructure side), `job_attempts` one row per attempt,
`incidents` one per 1,000 jobs with two impacted jobs each.

Then the read paths people use, each timed over many keys (p50 / p99 / max, in ms):
the job timeline (`Store.timeline`), the entity timeline (`Store.entity_timeline`, a node and a
switch over a day), `where` (`Store.attempts_at`, a node at an instant), the incident list
(`Store.incidents`, one project and an operator), and every panel and variable of the job,
incident and fleet dashboards (their SQL as the Grafana plugin expands it). `EXPLAIN
indexes = 1` shows the granules each key read.

    python -m bench.queries                    # 100 M rows (generation: minutes)
    python -m bench.queries --rows 2000000     # a quick look
    python -m bench.queries --home /var/tmp/q  # keep the store and reuse it next run
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

T0 = datetime(2026, 10, 1, tzinfo=UTC)
PROJECTS = 20
NODES = 4000
SPAN_S = 30 * 86400

# u(i, salt): a deterministic uniform in [0, 1) per generated row
_U = "(cityHash64({i}, {salt}) % 1000000) / 1000000."


def _u(i: str, salt: int) -> str:
    return _U.format(i=i, salt=salt)


def _job(i: str) -> str:
    # skewed job sizes: job j gets more rows the smaller it is
    return f"toUInt32(floor({{jobs:UInt32}} * pow({_u(i, 1)}, 1.6)))"


def generate(store: Any, rows: int) -> dict[str, float]:
    jobs = max(1, rows // 500)
    t0 = int(T0.timestamp())
    timings: dict[str, float] = {}
    params = {"jobs": jobs, "t0": t0, "span": SPAN_S, "nodes": NODES}

    def run(name: str, sql: str, **extra: Any) -> None:
        started = time.monotonic()
        store.client.command(sql, parameters={**params, **extra},
                             settings={"max_insert_threads": 2, "max_threads": 2})
        timings[name] = time.monotonic() - started
        print(f"  {name}: {timings[name]:.0f} s", flush=True)

    job = _job("number")
    start = "({t0:UInt32} + toUInt32(j * {span:UInt32} / {jobs:UInt32}))"
    run("job_timeline", f"""
        INSERT INTO job_timeline
        SELECT concat('proj-', toString(j % {PROJECTS})) AS project,
               concat('job-', toString(j)) AS job_id,
               1 + (cityHash64(number, 2) % 3 = 0) + (cityHash64(number, 3) % 9 = 0),
               fromUnixTimestamp64Milli(toInt64({start}) * 1000
                                        + toInt64(cityHash64(number, 4) % 86400000)),
               hex(cityHash64(number, 5)),
               concat('c', toString(j % 4)),
               src,
               ['job.step', 'node.xid', 'network.port_down', 'storage.slow_io',
                'scheduler.job_started'][k],
               ['info', 'error', 'warning', 'warning', 'info'][k],
               ['self', 'node', 'switch', 'filesystem', 'self'][k],
               ent,
               if(k = 3, concat('leaf-', toString(toUInt32(n / 16)), '/p', toString(n % 16)),
                  if(k = 4, concat('fs', toString(j % 8)), '')),
               ['job', 'node', 'port', 'filesystem', 'job'][k],
               node,
               concat('generated row ', toString(number)),
               if(k = 1, toJSONString(map('step', number % 100000)), char(123, 125))
        FROM (SELECT number, {job} AS j,
                     toUInt8(1 + cityHash64(number, 6) % 5) AS k,
                     ['job', 'node', 'network', 'storage', 'scheduler'][k] AS src,
                     toUInt32((j * 8 + cityHash64(number, 7) % 8) % {{nodes:UInt32}}) AS n,
                     concat('node-', leftPad(toString(n), 4, '0')) AS node,
                     if(k = 2, concat(node, '/gpu', toString(number % 8)), node) AS ent
              FROM numbers({{rows:UInt64}}))""", rows=rows)
    run("events", """
        INSERT INTO events (id, schema_version, type, source, time, observed_at, severity,
                            project, cluster, job_id, attempt, scope, entity, node, message,
                            attributes, producer)
        SELECT hex(cityHash64(number, 11)), 1,
               ['node.xid', 'network.port_down', 'storage.slow_io', 'node.drain'][k],
               ['node', 'network', 'storage', 'node'][k],
               fromUnixTimestamp64Milli(toInt64({t0:UInt32}) * 1000
                                        + toInt64(cityHash64(number, 12) % ({span:UInt32} * 1000))),
               now64(3), ['error', 'warning', 'warning', 'warning'][k], '',
               concat('c', toString(n % 4)), '', 0,
               ['gpu', 'port', 'filesystem', 'node'][k],
               multiIf(k = 1, concat(node, '/gpu', toString(number % 8)),
                       k = 2, concat('leaf-', toString(toUInt32(n / 16)), '/p', toString(n % 16)),
                       k = 3, concat('fs', toString(n % 8)), node),
               if(k = 3, '', node), concat('generated event ', toString(number)),
               if(k = 2, toJSONString(map('switch', concat('leaf-', toString(toUInt32(n / 16))))),
                  char(123, 125)),
               'bench'
        FROM (SELECT number, toUInt8(1 + cityHash64(number, 13) % 4) AS k,
                     toUInt32(cityHash64(number, 14) % {nodes:UInt32}) AS n,
                     concat('node-', leftPad(toString(n), 4, '0')) AS node
              FROM numbers({events:UInt64}))""", events=rows // 4)
    run("job_attempts", f"""
        INSERT INTO job_attempts (project, cluster, job_id, attempt, state, outcome,
                                  started_at, ended_at, nodes, gpus, mounts, version)
        SELECT concat('proj-', toString(j % {PROJECTS})), concat('c', toString(j % 4)),
               concat('job-', toString(j)), a, if(a = 3, 'running', 'ended'),
               if(a = 3, '', 'failed'),
               fromUnixTimestamp64Milli(toInt64({start}) * 1000 + (a - 1) * 28800000),
               if(a = 3, NULL,
                  fromUnixTimestamp64Milli(toInt64({start}) * 1000 + a * 28800000)),
               arrayMap(x -> concat('node-', leftPad(toString((j * 8 + x) % {{nodes:UInt32}}),
                                                     4, '0')), range(8)),
               64, [concat('fs', toString(j % 8), ':/data')], 1
        FROM (SELECT number AS j, arrayJoin([1, 2, 3]) AS a FROM numbers({{jobs:UInt32}}))""")
    run("incidents", f"""
        INSERT INTO incidents (incident_id, version, key, status, title, class, entity,
                               severity, owner, opened_at, first_signal_at, last_signal_at,
                               signals, impacted_jobs, impacted_gpus, lost_gpu_hours,
                               projects)
        SELECT concat('inc-', toString(number)), 1, concat('k', toString(number)),
               ['open', 'resolved', 'closed'][1 + number % 3], 'generated', 'gpu_xid',
               concat('node-', toString(number % {{nodes:UInt32}})),
               ['sev1', 'sev2', 'sev3'][1 + number % 3], 'gpu-ops', t, t, t, 3, 2, 128,
               (number % 100) / 3.,
               [concat('proj-', toString(number % {PROJECTS})),
                concat('proj-', toString((number + 1) % {PROJECTS}))]
        FROM (SELECT number, fromUnixTimestamp64Milli(toInt64({{t0:UInt32}}) * 1000
                     + toInt64(cityHash64(number, 21) % ({{span:UInt32}} * 1000))) AS t
              FROM numbers({{incidents:UInt32}}))""", incidents=max(1, jobs // 1000))
    run("incident_jobs", f"""
        INSERT INTO incident_jobs (incident_id, project, job_id, attempt, role, gpus,
                                   lost_gpu_hours, version)
        SELECT concat('inc-', toString(number)),
               concat('proj-', toString((number + x) % {PROJECTS})),
               concat('job-', toString(number * 1000 + x)), 1, 'failed', 64, 10., 1
        FROM numbers({{incidents:UInt32}}) ARRAY JOIN [0, 1] AS x""",
        incidents=max(1, jobs // 1000))
    return timings


def _time(fn: Callable[[], Any], runs: list[float]) -> Any:
    started = time.perf_counter()
    out = fn()
    runs.append((time.perf_counter() - started) * 1000)
    return out


def _figures(runs: list[float]) -> dict[str, float]:
    ordered = sorted(runs)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"n": len(runs), "p50_ms": round(statistics.median(ordered), 1),
            "p99_ms": round(p99, 1), "max_ms": round(ordered[-1], 1)}


def _granules(store: Any, sql: str, **params: Any) -> str:
    """`index granules-read/total` for each index EXPLAIN indexes = 1 lists."""
    plan = store.client.query("EXPLAIN indexes = 1 " + sql, parameters=params).result_rows
    lines = [str(r[0]).strip(" \u2502\u2514\u2500\u251c") for r in plan]
    out, index, inside = [], "", False
    for line in lines:
        if line == "Indexes:":
            inside = True
        elif inside and line in ("PrimaryKey", "MinMax", "Partition", "Skip"):
            index = line
        elif inside and line.startswith("Name:"):
            index = line.split(":", 1)[1].strip()
        elif inside and line.startswith("Granules:") and index:
            out.append(f"{index} {line.split(':', 1)[1].strip()}")
            index = ""
    return "; ".join(out)


def _explain(store: Any, call: Callable[[], Any]) -> str:
    """The granules the first query of a Store read path selects (its own SQL)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    original = store._dicts

    def spy(sql: str, **params: Any) -> Any:
        seen.append((sql, params))
        return original(sql, **params)

    store._dicts = spy
    try:
        call()
    finally:
        del store._dicts
    sql, params = seen[0]
    return _granules(store, sql, **params)


def measure(store: Any, rows: int, samples: int, seed: int) -> dict[str, Any]:
    from dashboards.build import built
    from dashboards.check import expand, targets

    rng = random.Random(seed)
    jobs = max(1, rows // 500)
    report: dict[str, Any] = {}
    # keys weighted like the rows: the jobs people open are often the big ones
    picks = [int(jobs * rng.random() ** 1.6) for _ in range(samples)]
    sizes: list[int] = []
    runs: list[float] = []
    for j in picks:
        rows_back = _time(partial(store.timeline, f"proj-{j % PROJECTS}", f"job-{j}"), runs)
        sizes.append(len(rows_back))
    report["job_timeline"] = {**_figures(runs), "rows_p50": statistics.median(sizes),
                              "rows_max": max(sizes)}
    report["job_timeline"]["explain"] = _explain(
        store, lambda: store.timeline(f"proj-{picks[0] % PROJECTS}", f"job-{picks[0]}"))

    day = timedelta(days=1)
    everyone = [f"proj-{p}" for p in range(PROJECTS)]
    for kind, prefix, count in (("node", "node-", NODES), ("switch", "leaf-", NODES // 16)):
        runs = []
        for _ in range(max(5, samples // 5)):
            since = T0 + timedelta(seconds=rng.randrange(SPAN_S - 86400))
            n = rng.randrange(count)
            name = f"{prefix}{n:04d}" if kind == "node" else f"{prefix}{n}"
            _time(partial(store.entity_timeline, everyone, name, since=since,
                          until=since + day), runs)
        report[f"entity_timeline_{kind}_1d"] = _figures(runs)
    report["entity_timeline_node_1d"]["explain"] = _explain(
        store, lambda: store.entity_timeline(["proj-1"], "node-0042", since=T0 + day,
                                             until=T0 + 2 * day))

    runs = []
    for _ in range(max(5, samples // 5)):
        at = T0 + timedelta(seconds=rng.randrange(SPAN_S))
        node = f"node-{rng.randrange(NODES):04d}"
        _time(partial(store.attempts_at, everyone, at, nodes=[node]), runs)
    report["where_node"] = _figures(runs)
    report["where_node"]["explain"] = _explain(
        store, lambda: store.attempts_at(["proj-1"], T0 + day, nodes=["node-0042"]))

    for who, projects in (("project", ["proj-3"]), ("operator", None)):
        runs = []
        for _ in range(max(5, samples // 5)):
            _time(partial(store.incidents, projects), runs)
        report[f"incident_list_{who}"] = _figures(runs)
    report["incident_list_project"]["explain"] = _explain(store,
                                                          lambda: store.incidents(["proj-3"]))

    j = picks[0]
    variables = {"project": f"proj-{j % PROJECTS}", "job": f"job-{j}", "attempt": "all",
                 "incident": "inc-7", "jobtrail_url": "http://localhost:8080"}
    start = T0 + timedelta(seconds=j * SPAN_S // jobs) - timedelta(hours=1)
    panels: dict[str, dict[str, float]] = {}
    for name, board in built().items():
        window = (start, start + timedelta(days=2)) if name != "fleet" else (
            T0 + timedelta(days=20), T0 + timedelta(days=21))
        for _, title, target in targets(board):
            runs = []
            sql = expand(target["rawSql"], variables, *window, 60)
            for _ in range(3):
                _time(partial(store.client.query, sql), runs)
            panels[f"{name}/{title}"] = _figures(runs)
    report["dashboard_panels"] = panels
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--samples", type=int, default=100, help="job timelines to time")
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=16)
    opts = parser.parse_args()
    from jobtrail.store import Store

    with tempfile.TemporaryDirectory(prefix="jobtrail-queries-") as tmp:
        home = opts.home or Path(tmp)
        store = Store.connect(f"chdb://{home / 'chdb'}")
        store.migrate()
        have = store.count("job_timeline", final=False)
        if have != opts.rows:
            if have:
                for table in ("job_timeline", "events", "job_attempts", "incidents",
                              "incident_jobs"):
                    store.client.command(f"TRUNCATE TABLE {table}")
            print(f"generating {opts.rows:,} timeline rows", flush=True)
            generate(store, opts.rows)
        parts = store.client.query(
            "SELECT table, count(), sum(rows), formatReadableSize(sum(bytes_on_disk)) "
            "FROM system.parts WHERE active AND database = currentDatabase() "
            "AND table IN ('job_timeline', 'events') GROUP BY table").result_rows
        print("stored: " + ", ".join(f"{t} {r:,} rows in {p} parts ({s})"
                                    for t, p, r, s in parts), flush=True)
        report = measure(store, opts.rows, opts.samples, opts.seed)
        store.close()
    panels = report.pop("dashboard_panels")
    print(json.dumps(report, indent=2))
    print("dashboard panels (ms, 3 runs each):")
    for title, figures in sorted(panels.items(), key=lambda kv: -kv[1]["p50_ms"]):
        print(f"  {figures['p50_ms']:8.1f} p50  {figures['max_ms']:8.1f} max  {title}")


if __name__ == "__main__":
    main()
