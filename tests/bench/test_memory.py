"""State per partition is bounded by open work: the soak's churn (`bench.memory`), small and
in event time. Incidents open and are resolved, attempts start and finish; after each closed
incident's eviction time it is no longer in memory, and what the state holds per job and per
signal follows the jobs running and the windows, not everything ever seen. Counts, never RSS."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from bench.memory_load import T0, Churn, FileArchive, Load, _events, _wiring, sizes
from processors.incidents.eviction import Eviction
from processors.incidents.rules import load_rules
from processors.pipeline import Pipeline

OPEN_JOBS = 40
RETENTION = timedelta(minutes=30)
EVICT_AFTER = timedelta(minutes=10)


def _settled_at(archive: FileArchive) -> dict[str, datetime]:
    """Incidents whose last logged event settled them (resolved, closed), and when."""
    last: dict[str, tuple[int, str, str]] = {}
    for incident, seq, body in archive.db.execute("SELECT incident, seq, body FROM log"):
        event = json.loads(body)
        if seq >= last.get(incident, (0, "", ""))[0]:
            last[incident] = (seq, event["kind"], event["time"])
    return {i: datetime.fromisoformat(t.replace("Z", "+00:00"))
            for i, (_, kind, t) in last.items() if kind in ("resolved", "closed")}


def test_closed_incidents_leave_memory_and_the_state_follows_open_work() -> None:
    # no repeat-offender verdicts: a standing incident links every failure on its node and
    # stays in memory while they come (referenced work); here every incident is one job's
    rules = load_rules().model_copy(update={"repeat_offender_count": 10**6})
    pipeline = Pipeline(timedelta(seconds=30), _wiring(64), rules=rules)
    pipeline.job_retention = RETENTION
    archive = FileArchive()
    pipeline.archive(archive, Eviction(after=EVICT_AFTER, quiet_after=RETENTION))
    load = Load(64, OPEN_JOBS, spacing_ms=500, incident_rate=0.01, staggered=False)
    churn = Churn(pipeline, load, archive, resolve_after=timedelta(minutes=5))
    pipeline.process(_events(load.opening()))
    mid: dict[str, int] = {}
    while load.t - T0 < timedelta(hours=10):
        churn.step(500)
        if not mid and load.t - T0 >= timedelta(hours=5):
            mid, mid_resolved, mid_started = sizes(pipeline), churn.resolved, load.next_job
    held = sizes(pipeline)
    book = pipeline.detector.book
    resolved = _settled_at(archive)
    # a job runs up to 3 h, is remembered for `RETENTION` after, its incident evicted after
    long_ago = load.t - timedelta(hours=3) - RETENTION - EVICT_AFTER - pipeline.lateness \
        - timedelta(minutes=20)
    gone = [i for i, at in resolved.items() if at < long_ago]
    assert churn.resolved > 100 and len(gone) > 15 and load.next_job > 3 * OPEN_JOBS
    assert not [i for i in gone if i in book.incidents.resident()]
    total = archive.db.execute("SELECT count(DISTINCT incident) FROM log").fetchone()[0]
    assert held["incidents"] < total / 3
    assert archive.reads > 0
    # per job: the jobs running and those that ended within the retention
    assert held["jobs"] <= 2 * OPEN_JOBS and held["detector_jobs"] <= 2 * OPEN_JOBS
    assert held["progress"] <= 2 * OPEN_JOBS and held["placed"] <= 2 * OPEN_JOBS
    assert held["pending"] <= 2 * OPEN_JOBS
    # flat: from hour 5 to hour 10 the work done doubles, what the state holds does not
    assert churn.resolved > 1.6 * mid_resolved and load.next_job > 1.6 * mid_started
    for name in ("jobs", "placed", "waiting", "incidents", "open", "resolved", "by_attempt",
                 "pending", "detector_jobs", "progress", "signals", "counts", "timers",
                 "node_incidents", "symptom_counts", "journal", "checkpoints", "touched"):
        assert held[name] <= 1.3 * mid[name] + 10, (name, mid[name], held[name])
    assert held["last_touch"] <= held["incidents"]
