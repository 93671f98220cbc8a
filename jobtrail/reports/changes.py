"""Changes governed: what each `change.*` touched, and whether things got worse after it.

A change is a `change.applied` event (attributes `kind`, `before`, `after`, `ticket`; extra
attributes are kept: `canary: true` declares its entity the canary scope, `rollback_of:
<ticket or event id>` marks it as the rollback of an earlier change). It touched the nodes
it names (its node or entity) and the attempts the pipeline put it on (`job_timeline`,
relation `change`).

For its nodes, the attempts that ran in the window before it are compared with those after:
failure rate overall and by class (the attempt's `end_reason`), median step time, incidents
opened on the nodes. Every figure is the caller's projects' (attempts, steps, and incidents
that touched their jobs or none): another project's attempts and incidents on the same nodes
are not counted. The verdict is "regressed" when failures rose with a one-sided Fisher
exact p below `alpha`, or the median step time rose by more than `slow_ratio` with a
one-sided Mann-Whitney p below `alpha`; confidence is 1 - p of the test that decided (the
smaller p when both ran). Too few attempts on either side is "insufficient evidence".
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

MIN_ATTEMPTS = 3


@dataclass(frozen=True)
class Side:
    """Attempts on the change's nodes on one side of it."""

    attempts: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    step_times: tuple[float, ...] = ()
    incidents: int = 0

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    @property
    def failure_rate(self) -> float:
        return self.failed / self.attempts if self.attempts else 0.0

    @property
    def step_time(self) -> float | None:
        return statistics.median(self.step_times) if self.step_times else None


@dataclass(frozen=True)
class Verdict:
    verdict: str  # regressed, no regression, insufficient evidence
    confidence: float
    why: str


def fisher_greater(a_fail: int, a_n: int, b_fail: int, b_n: int) -> float:
    """One-sided Fisher exact p that side b fails more than side a by chance."""
    total, k = a_n + b_n, a_fail + b_fail
    denom = math.comb(total, k)
    return sum(math.comb(b_n, x) * math.comb(a_n, k - x)
               for x in range(b_fail, min(b_n, k) + 1) if k - x <= a_n) / denom


def mann_whitney_greater(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided p (normal approximation, ties averaged) that b is larger than a."""
    n1, n2 = len(a), len(b)
    if not n1 or not n2:
        return 1.0
    ranked = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    ranks: list[float] = [0.0] * len(ranked)
    i = 0
    while i < len(ranked):
        j = i
        while j + 1 < len(ranked) and ranked[j + 1][0] == ranked[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    u = sum(r for r, (_, side) in zip(ranks, ranked, strict=True) if side == 1) \
        - n2 * (n2 + 1) / 2
    sigma = math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    return 0.5 * math.erfc((u - n1 * n2 / 2) / sigma / math.sqrt(2)) if sigma else 1.0


def judge(before: Side, after: Side, *, alpha: float = 0.05,
          slow_ratio: float = 1.05) -> Verdict:
    if before.attempts < MIN_ATTEMPTS or after.attempts < MIN_ATTEMPTS:
        return Verdict("insufficient evidence", 0.0,
                       f"{before.attempts} attempts before, {after.attempts} after "
                       f"(at least {MIN_ATTEMPTS} each)")
    p_fail = fisher_greater(before.failed, before.attempts, after.failed, after.attempts)
    p_slow, ratio = 1.0, 1.0
    if before.step_time and after.step_time:
        ratio = after.step_time / before.step_time
        if ratio > slow_ratio:
            p_slow = mann_whitney_greater(before.step_times, after.step_times)
    why = (f"failures {before.failed}/{before.attempts} -> {after.failed}/{after.attempts} "
           f"(p={p_fail:.4f}); median step time x{ratio:.2f} (p={p_slow:.4f})")
    p = min(p_fail, p_slow)
    if p < alpha:
        return Verdict("regressed", 1 - p, why)
    return Verdict("no regression", 1 - p_fail, why)


@dataclass(frozen=True)
class ChangeReport:
    event_id: str
    time: datetime
    kind: str
    entity: str
    nodes: tuple[str, ...]
    jobs: tuple[tuple[str, str, int], ...]
    canary: bool
    rollback_of: str
    before: Side
    after: Side
    verdict: Verdict


def _side(attempts: Sequence[dict[str, Any]], steps: dict[tuple[str, str, int], list[float]],
          incidents: int) -> Side:
    failures: Counter[str] = Counter(a["end_reason"] or a["outcome"] for a in attempts
                                     if a["outcome"] in ("failed", "timeout"))
    times = tuple(t for a in attempts for t in steps.get(
        (a["project"], a["job_id"], a["attempt"]), []))
    return Side(len(attempts), failures, times, incidents)


MAX_WINDOW = timedelta(days=365)
"""The longest before/after window a change is compared over (`--window-days`)."""


def load(store: Any, projects: Sequence[str], since: datetime, until: datetime, *,
         window: timedelta = timedelta(days=7)) -> list[ChangeReport]:
    """Every change in [since, until) with its evidence; attempts of `projects` only."""
    if not timedelta(0) < window <= MAX_WINDOW:  # refused before any query is built
        raise ValueError(f"window: more than 0 and at most {MAX_WINDOW.days} days, got {window}")
    changes = store._dicts(
        "SELECT id, time, entity, node, attributes FROM events FINAL "
        "WHERE type LIKE 'change.%' AND time >= {lo:DateTime64(3, 'UTC')} "
        "AND time < {hi:DateTime64(3, 'UTC')} ORDER BY time, id", lo=since, hi=until)
    out = []
    for c in changes:
        attrs = json.loads(c["attributes"] or "{}")
        nodes = tuple(sorted({n for n in (c["node"], c["entity"].split("/")[0])
                              if n.startswith("node")}))
        jobs = tuple((r["project"], r["job_id"], r["attempt"]) for r in store._dicts(
            "SELECT DISTINCT project, job_id, attempt FROM job_timeline FINAL "
            "WHERE event_id = {id:String} AND project IN {p:Array(String)} "
            "ORDER BY project, job_id, attempt", id=c["id"], p=list(projects)))
        sides = []
        for lo, hi in ((c["time"] - window, c["time"]), (c["time"], c["time"] + window)):
            attempts = store._dicts(
                "SELECT project, job_id, attempt, outcome, end_reason FROM job_attempts FINAL "
                "WHERE project IN {p:Array(String)} AND hasAny(nodes, {n:Array(String)}) "
                "AND started_at >= {lo:DateTime64(3, 'UTC')} "
                "AND started_at < {hi:DateTime64(3, 'UTC')}",
                p=list(projects), n=list(nodes), lo=lo, hi=hi)
            steps: dict[tuple[str, str, int], list[float]] = {}
            for r in store._dicts(
                    "SELECT project, job_id, attempt, JSONExtractFloat(attributes, "
                    "'step_time_s') AS t FROM job_timeline FINAL WHERE relation = 'self' "
                    "AND type = 'job.step' AND project IN {p:Array(String)} "
                    "AND time >= {lo:DateTime64(3, 'UTC')} AND time < {hi:DateTime64(3, 'UTC')} "
                    "AND t > 0", p=list(projects), lo=lo, hi=hi):
                steps.setdefault((r["project"], r["job_id"], r["attempt"]), []).append(r["t"])
            incidents = store._q(  # the caller's and the cluster's, never another's
                "SELECT count() FROM incidents FINAL WHERE splitByChar('/', "
                "if(cause_entity != '', cause_entity, entity))[1] IN {n:Array(String)} "
                "AND (empty(projects) OR hasAny(projects, {p:Array(String)})) "
                "AND NOT has(flags, 'withdrawn') "
                "AND opened_at >= {lo:DateTime64(3, 'UTC')} "
                "AND opened_at < {hi:DateTime64(3, 'UTC')}",
                n=list(nodes), p=list(projects), lo=lo, hi=hi).result_rows[0][0]
            sides.append(_side(attempts, steps, incidents))
        out.append(ChangeReport(
            c["id"], c["time"], str(attrs.get("kind", "")), c["entity"], nodes, jobs,
            bool(attrs.get("canary")), str(attrs.get("rollback_of") or ""), sides[0],
            sides[1], judge(sides[0], sides[1])))
    return out


def markdown(reports: Sequence[ChangeReport], *, title: str) -> str:
    lines = [f"# {title}", "", "| time | change | entity | canary | rollback of | jobs | "
             "failure rate before -> after | incidents before -> after | verdict | "
             "confidence |", "|---|---|---|---|---|---:|---|---|---|---:|"]
    for r in reports:
        lines.append(
            f"| {r.time:%Y-%m-%d %H:%M} | {r.kind} | {r.entity} | "
            f"{'yes' if r.canary else ''} | {r.rollback_of} | {len(r.jobs)} | "
            f"{r.before.failure_rate:.0%} -> {r.after.failure_rate:.0%} | "
            f"{r.before.incidents} -> {r.after.incidents} | {r.verdict.verdict} | "
            f"{r.verdict.confidence:.3f} |")
    lines += [""] + [f"- {r.event_id}: {r.verdict.why}" for r in reports]
    return "\n".join(lines) + "\n"


def cited_by_incident(store: Any, projects: Sequence[str], incident_id: str, *,
                      window: timedelta = timedelta(days=7)) -> list[dict[str, Any]]:
    """The changes an incident cites: on its entities (its entity, cause and evidence, by
    node or by full name) or on its jobs' timelines, in the window before it opened."""
    [row] = store._dicts(
        "SELECT opened_at, entity, cause_entity FROM incidents FINAL "
        "WHERE incident_id = {id:String} AND (empty(projects) "
        "OR hasAny(projects, {p:Array(String)}))", id=incident_id, p=list(projects)) or [None]
    if row is None or row["opened_at"] is None:
        return []
    entities = {row["entity"], row["cause_entity"]} | {r["entity"] for r in store._dicts(
        "SELECT DISTINCT entity FROM incident_evidence FINAL WHERE incident_id = {id:String} "
        "AND role != 'moved'",
        id=incident_id)}
    entities |= {e.split("/")[0] for e in entities}
    entities.discard("")
    return list(store._dicts(
        "SELECT id, time, entity, JSONExtractString(attributes, 'kind') AS kind, "
        "JSONExtractString(attributes, 'ticket') AS ticket FROM events FINAL "
        "WHERE type LIKE 'change.%' AND time <= {t:DateTime64(3, 'UTC')} "
        "AND time >= {t:DateTime64(3, 'UTC')} - toIntervalSecond({w:Int64}) "
        "AND (entity IN {e:Array(String)} OR node IN {e:Array(String)} OR id IN ("
        "SELECT t.event_id FROM job_timeline AS t WHERE t.relation = 'change' "
        "AND t.project IN {p:Array(String)} AND (t.project, t.job_id) IN (SELECT project, "
        "job_id FROM incident_jobs FINAL WHERE incident_id = {id:String} "
        "AND role != 'moved'))) ORDER BY time, id",
        t=row["opened_at"], w=int(window.total_seconds()), e=sorted(entities),
        p=list(projects), id=incident_id))
