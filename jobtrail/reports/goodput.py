"""Goodput per job and attempt: where a job's wall time went, in the goodput literature's
buckets, and what each failure cost.

From the job's submission to the end of its last attempt, every second is in one bucket:

- `queue`: submitted -> first attempt started (initial scheduling);
- `restore`: an attempt started -> its first step event (start-up, restart and checkpoint
  restore overhead: "until progress resumes", as the incident loss rule counts it);
- `thrown_away`: a failed attempt's last good checkpoint -> its failure (work done, then
  lost; a hang before the failure included). No checkpoint in the attempt: all its steps;
- `held_wait` and `requeue_wait`: an attempt ended -> the next one started (waiting for
  scheduling after a failure), split as the incident loss rule splits it
  (`processors.incidents.impact.wait_split`): held while the scheduler says the restart
  waits for resources with its allocation held, queued from a reason that says it queued
  behind other work (priority, quota, ...) and after a preemption;
- `degraded`: fail-slow time in work that was kept: for each interval between step events,
  what it took beyond (steps done x the attempt's median `step_time_s`);
- `productive`: the rest of each attempt's run.

So the buckets add up to the wall time exactly. ETTR (effective training time ratio) is
productive / wall. GPU-hours multiply the attempt's GPUs by its compute buckets and its
held wait; the initial queue and the requeue wait hold no GPUs (DESIGN §9). A failure's
cost is GPUs x (thrown away + held wait + the next attempt's restore): the corrected loss
rule, so it equals what the failure's incident counted (the sample's test checks it).
Re-doing thrown-away steps after a restore is productive, not a second loss.

The checkpoint interval that minimises the expected loss for the job's observed failure rate
(mean time between failures M over its run time) and checkpoint cost C (median
`duration_s` of its saves) is Young's sqrt(2CM), and Daly's first order sqrt(2CM) - C.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from processors.attempts import Attempt
from processors.incidents.impact import queued

BUCKETS = ("queue", "restore", "productive", "thrown_away", "degraded", "held_wait",
           "requeue_wait")
COMPUTE = ("restore", "productive", "thrown_away", "degraded", "held_wait")
FAILED = ("failed", "timeout", "preempted", "requeued", "node_fail")


@dataclass(frozen=True)
class AttemptGoodput:
    attempt: int
    gpus: int
    outcome: str
    seconds: dict[str, float]
    """This attempt's buckets (its `requeue_wait` is the wait before it)."""
    failure_cost_gpu_hours: float = 0.0


@dataclass(frozen=True)
class JobGoodput:
    project: str
    job_id: str
    wall_s: float
    seconds: dict[str, float]
    gpu_hours: dict[str, float]
    ettr: float
    attempts: list[AttemptGoodput] = field(default_factory=list)
    failures: int = 0
    mtbf_s: float | None = None
    checkpoint_cost_s: float | None = None
    checkpoint_interval_s: float | None = None
    young_interval_s: float | None = None
    daly_interval_s: float | None = None


def _s(a: datetime, b: datetime) -> float:
    return max(0.0, (b - a).total_seconds())


def _of(rows: Sequence[Mapping[str, Any]], attempt: int, kind: str) -> list[Mapping[str, Any]]:
    return [r for r in rows if r["attempt"] == attempt and r["type"] == kind]


def _degraded(steps: Sequence[Mapping[str, Any]], until: datetime) -> float:
    """Fail-slow seconds in the kept work: each step interval's excess over its step count
    times the attempt's median step time."""
    times = [r["attributes"].get("step_time_s") for r in steps]
    baseline = statistics.median([t for t in times if isinstance(t, int | float)] or [0.0])
    slow = 0.0
    for prev, cur in itertools.pairwise(steps):
        if cur["time"] > until or not baseline:
            break
        done = int(cur["attributes"].get("step", 0)) - int(prev["attributes"].get("step", 0))
        slow += max(0.0, _s(prev["time"], cur["time"]) - done * baseline)
    return slow


def _wait(prev: Attempt, nxt: Attempt, ended: datetime) -> tuple[float, float]:
    """(held, queued) seconds between two attempts, by the pending reasons in between."""
    assert nxt.started_at is not None
    if prev.outcome == "preempted":
        return 0.0, _s(ended, nxt.started_at)
    marks = sorted({(at, r) for a in (prev, nxt) for at, r in a.pending
                    if ended < at < nxt.started_at})
    held = queue = 0.0
    since, queueing = ended, False
    for at, reason in marks:
        if queueing:
            queue += _s(since, at)
        else:
            held += _s(since, at)
        since, queueing = at, queued(reason)
    rest = _s(since, nxt.started_at)
    return (held, queue + rest) if queueing else (held + rest, queue)


def split(project: str, job_id: str, attempts: Sequence[Attempt],
          timeline: Sequence[Mapping[str, Any]]) -> JobGoodput:
    """The job's goodput split from its attempts and its timeline rows (time, attempt, type,
    attributes), as `Store.attempts` and `Store.timeline` return them."""
    ran = sorted((a for a in attempts if a.started_at is not None), key=lambda a: a.attempt)
    totals = dict.fromkeys(BUCKETS, 0.0)
    gpu_hours = dict.fromkeys(BUCKETS, 0.0)
    out: list[AttemptGoodput] = []
    submitted = min((a.submitted_at for a in attempts if a.submitted_at), default=None)
    first = ran[0].started_at if ran else None
    end = first
    if submitted is not None and first is not None:
        totals["queue"] = _s(submitted, first)
    failures, run_s, ckpt_costs = 0, 0.0, []
    for i, a in enumerate(ran):
        assert a.started_at is not None
        ended = a.ended_at or max((r["time"] for r in timeline if r["attempt"] == a.attempt),
                                  default=a.started_at)
        b = dict.fromkeys(BUCKETS, 0.0)
        if i and end is not None:
            b["held_wait"], b["requeue_wait"] = _wait(ran[i - 1], a, end)
        steps = sorted((r for r in _of(timeline, a.attempt, "job.step")
                        if a.started_at <= r["time"] <= ended), key=lambda r: r["time"])
        resumed = steps[0]["time"] if steps else ended
        b["restore"] = _s(a.started_at, resumed)
        saves = [r for r in _of(timeline, a.attempt, "checkpoint.saved") if r["time"] <= ended]
        ckpt_costs += [float(r["attributes"]["duration_s"]) for r in saves
                       if isinstance(r["attributes"].get("duration_s"), int | float)]
        failed = a.outcome in FAILED
        kept_until = ended
        if failed:
            failures += 1
            kept_until = max((r["time"] for r in saves), default=resumed)
            b["thrown_away"] = _s(kept_until, ended)
        b["degraded"] = _degraded(steps, kept_until)
        run = _s(a.started_at, ended)
        run_s += run
        b["productive"] = run - b["restore"] - b["thrown_away"] - b["degraded"]
        for k, v in b.items():
            totals[k] += v
            if k in COMPUTE:
                gpu_hours[k] += a.gpus * v / 3600
        out.append(AttemptGoodput(a.attempt, a.gpus, a.outcome or a.state, b))
        end = ended
    for i, g in enumerate(out):  # a failure costs its thrown work and the next restore
        if g.outcome in FAILED:
            nxt = (out[i + 1].seconds["restore"] + out[i + 1].seconds["held_wait"]
                   if i + 1 < len(out) else 0.0)
            out[i] = AttemptGoodput(g.attempt, g.gpus, g.outcome, g.seconds,
                                    round(g.gpus * (g.seconds["thrown_away"] + nxt) / 3600, 6))
    origin = submitted or first
    wall = _s(origin, end) if origin is not None and end is not None else 0.0
    mtbf = run_s / failures if failures else None
    cost = statistics.median(ckpt_costs) if ckpt_costs else None
    saves_at = sorted(r["time"] for r in timeline if r["type"] == "checkpoint.saved")
    gaps = [_s(x, y) for x, y in itertools.pairwise(saves_at)]
    young = math.sqrt(2 * cost * mtbf) if cost and mtbf else None
    return JobGoodput(
        project=project, job_id=job_id, wall_s=wall, seconds=totals,
        gpu_hours={k: round(v, 6) for k, v in gpu_hours.items()},
        ettr=totals["productive"] / wall if wall else 0.0, attempts=out, failures=failures,
        mtbf_s=mtbf, checkpoint_cost_s=cost,
        checkpoint_interval_s=statistics.median(gaps) if gaps else None,
        young_interval_s=young,
        daly_interval_s=young - cost if young is not None and cost is not None and
        cost < 2 * (mtbf or 0) else None)


def markdown(g: JobGoodput, incidents: Sequence[Mapping[str, Any]] = ()) -> str:
    """The goodput report of one job, with the incidents that cost it (incident_jobs rows)."""
    lines = [f"# Goodput of {g.project}/{g.job_id}", "",
             f"Wall time {g.wall_s:.0f} s, ETTR {g.ettr:.4f}, failures {g.failures}.", "",
             "| bucket | seconds | share | GPU-hours |", "|---|---:|---:|---:|"]
    for k in BUCKETS:
        share = g.seconds[k] / g.wall_s if g.wall_s else 0.0
        lines.append(f"| {k} | {g.seconds[k]:.1f} | {share:.2%} | {g.gpu_hours[k]:.3f} |")
    lines += ["", "| attempt | GPUs | outcome | productive s | thrown away s | restore s | "
              "failure cost GPU-h |", "|---:|---:|---|---:|---:|---:|---:|"]
    for a in g.attempts:
        s = a.seconds
        lines.append(f"| {a.attempt} | {a.gpus} | {a.outcome} | {s['productive']:.1f} | "
                     f"{s['thrown_away']:.1f} | {s['restore']:.1f} | "
                     f"{a.failure_cost_gpu_hours:.3f} |")
    for r in incidents:
        lines.append(f"- incident {r['incident_id']} (attempt {r['attempt']}): "
                     f"{float(r['lost_gpu_hours']):.3f} GPU-h as the incident counted it")
    if g.young_interval_s is not None:
        lines += ["", f"Checkpoints: every {g.checkpoint_interval_s or 0:.0f} s at "
                  f"{g.checkpoint_cost_s:.1f} s each; for a failure every {g.mtbf_s:.0f} s of "
                  f"run, Young's interval is {g.young_interval_s:.0f} s, Daly's "
                  f"{g.daly_interval_s or 0:.0f} s."]
    return "\n".join(lines) + "\n"


# --- reads (always bound to the caller's project) ----------------------------------------

def load(store: Any, project: str, job_id: str) -> JobGoodput:
    """The job's goodput from the store."""
    return split(project, job_id, store.attempts(project, job_id),
                 store.timeline(project, job_id, limit=1_000_000))


def incident_costs(store: Any, project: str, job_id: str) -> list[dict[str, Any]]:
    """The incidents that hit the job's attempts, with the loss each counted."""
    return list(store._dicts(
        "SELECT incident_id, attempt, role, gpus, lost_gpu_hours FROM incident_jobs FINAL "
        "WHERE project = {project:String} AND job_id = {job_id:String} AND role != 'moved' "
        "ORDER BY attempt, incident_id", project=project, job_id=job_id))


def node_mtbi(store: Any, projects: Sequence[str], since: datetime,
              until: datetime) -> list[dict[str, Any]]:
    """Per node, incidents opened on it (the incident's entity or cause) in [since, until)
    and the mean time between them in hours: the lemon signal, most incidents first.
    Cluster-level incidents (no project) and those of the caller's projects count."""
    hours = _s(since, until) / 3600
    return list(store._dicts(
        "SELECT splitByChar('/', if(cause_entity != '', cause_entity, entity))[1] AS node, "
        "count() AS incidents, {hours:Float64} / count() AS mtbi_hours FROM incidents FINAL "
        "WHERE (empty(projects) OR hasAny(projects, {projects:Array(String)})) "
        "AND opened_at >= {since:DateTime64(3, 'UTC')} "
        "AND opened_at < {until:DateTime64(3, 'UTC')} "
        "AND node LIKE 'node%' GROUP BY node ORDER BY incidents DESC, node",
        projects=list(projects), since=since, until=until, hours=hours))


def checkpoints(store: Any, project: str, *, job_id: str = "", model_version: str = "",
                data_version: str = "") -> list[dict[str, Any]]:
    """Checkpoints saved in a project with the job, attempt, step, path and the model and
    data versions they held: "which model/data did this checkpoint hold" and back."""
    return list(store._dicts(
        "SELECT job_id, attempt, time, JSONExtractInt(attributes, 'step') AS step, "
        "JSONExtractString(attributes, 'path') AS path, "
        "JSONExtractString(attributes, 'model_version') AS model_version, "
        "JSONExtractString(attributes, 'data_version') AS data_version "
        "FROM job_timeline FINAL WHERE project = {project:String} AND relation = 'self' "
        "AND type = 'checkpoint.saved' AND ({job:String} = '' OR job_id = {job:String}) "
        "AND ({model:String} = '' OR model_version = {model:String}) "
        "AND ({data:String} = '' OR data_version = {data:String}) ORDER BY job_id, time",
        project=project, job=job_id, model=model_version, data=data_version))
