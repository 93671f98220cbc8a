"""Progress that stops or slows: hangs, fail-slow and stragglers, raised as symptoms by the
rules' `progress` section, on event time (the watermark), never the wall clock.

- hang: no step or checkpoint for `hang.after_s`.
- fail-slow: the attempt's step time above `ratio` x its own recent baseline (the median
  of its last normal samples) for `for_s`; localised like any symptom to a signal in its
  fault domain since shortly before it slowed (a throttling GPU, a storage latency alert).
- straggler: ranks that report their own step times, grouped by node: a node whose median
  is above `ratio` x the other nodes' for `for_s` is localised to that node (its own
  warning if it gave one, else class `straggler_class`).
A degraded attempt's loss is counted when the slow-down ends (back to normal, or the
attempt ends): GPUs x slowed time x (1 - normal rate / slow rate).
"""

from __future__ import annotations

import statistics
from collections import deque
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from processors.incidents import actions, cause, impact, opening, routing
from processors.incidents.book import AttemptKey, Progress, Signal, akey, jobref
from processors.incidents.rules import SymptomRule
from schemas import incident_events as ev
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.context import Context


def arm_hang(ctx: Context, progress: Progress, key: AttemptKey) -> None:
    """One pending hang timer per attempt; it re-arms itself when progress moved on."""
    if not progress.hang_armed and progress.last_step_at is not None:
        progress.hang_armed = True
        ctx.book.push_timer(progress.last_step_at + timedelta(
            seconds=ctx.rules.progress.hang.after_s), "hang", "", key)


def hang(ctx: Context, when: datetime, key: AttemptKey) -> None:
    book = ctx.book
    progress = book.progress.get(key)
    attempt = book.attempt(key)
    if progress is None or progress.last_step_at is None:
        return
    progress.hang_armed = False
    cfg = ctx.rules.progress.hang
    if progress.last_step_at + timedelta(seconds=cfg.after_s) > when:
        arm_hang(ctx, progress, key)  # progress moved on since this timer was set
        return
    if attempt is not None and attempt.outcome:
        return  # the attempt ended; its end is the symptom, not a hang
    if book.active(key) is not None:
        return
    rule = SymptomRule.model_validate(
        {"name": "hang", "types": ["job.step"], "class": cfg.klass, "rank": cfg.rank,
         "why": f"no progress for {cfg.after_s / 60:.0f} min after step {progress.last_step}"})
    cause.on_symptom(ctx, None, rule, key, when, f"hang:{progress.last_step_event}")


def _own_series(event: Event) -> bool:
    """The attempt's own step time: reported without a rank, or by rank 0."""
    entity = event.entity or ""
    return not entity.startswith("rank-") or entity == "rank-0"


def sample(ctx: Context, event: Event, key: AttemptKey, progress: Progress,
           step_time: float) -> None:
    cfg = ctx.rules.progress.fail_slow
    if event.node:
        series = progress.by_node.setdefault(event.node, deque(maxlen=4 * cfg.baseline_steps))
        series.append(step_time)
        _straggler(ctx, event, key, progress)
    if _own_series(event):
        _fail_slow(ctx, event, key, progress, step_time)


def _fail_slow(ctx: Context, event: Event, key: AttemptKey, progress: Progress,
               step_time: float) -> None:
    cfg = ctx.rules.progress.fail_slow
    if len(progress.normal) < cfg.baseline_steps:
        progress.normal.append(step_time)
        return
    baseline = statistics.median(list(progress.normal)[-cfg.baseline_steps:])
    if step_time <= baseline * cfg.ratio:
        if progress.slow_since is not None:
            _episode_over(ctx, key, progress, event.time, baseline)
        progress.normal.append(step_time)
        return
    progress.slow_since = progress.slow_since or event.time
    progress.slow_samples.append(step_time)
    if progress.slow_reported or (event.time - progress.slow_since).total_seconds() < cfg.for_s:
        return
    if ctx.book.active(key) is not None:
        return
    progress.slow_reported = True
    rule = SymptomRule.model_validate(
        {"name": "fail-slow", "types": ["job.step"], "class": cfg.klass, "rank": cfg.rank,
         "why": f"step time {step_time:.2f} s is above {cfg.ratio:g} x the baseline "
         f"{baseline:.2f} s for {cfg.for_s / 60:.0f} min with no error"})
    # localise: any signal in the fault domain since shortly before it slowed down; heat or
    # throttling on several of its nodes names those nodes (their rack, their leaf)
    since = progress.slow_since - timedelta(seconds=ctx.rules.cause_window_s)
    warned = _warned_nodes(ctx, key, since, event.time)
    if len(warned) >= 2:
        progress.slow_incident = _report_warned(ctx, event, key, rule, warned)
        return
    progress.slow_incident = cause.on_symptom(ctx, event, rule, key, event.time,
                                              f"slow:{akey(key)}", since) or ""


_WARNINGS = frozenset({"node.throttled", "node.thermal"})


def _warned_nodes(ctx: Context, key: AttemptKey, since: datetime,
                  time: datetime) -> dict[str, list[Signal]]:
    """The attempt's nodes that warned of throttling or heat in the window, with the
    warnings (in time order)."""
    hi = time + timedelta(seconds=ctx.rules.cause_slack_s)
    out: dict[str, list[Signal]] = {}
    for signal in ctx.book.signals:
        node = signal.event.node or ""
        if signal.event.type in _WARNINGS and node and key in signal.reached and \
                since <= signal.event.time <= hi:
            out.setdefault(node, []).append(signal)
    return out


def _where(ctx: Context, nodes: list[str], time: datetime) -> tuple[str, str]:
    """(entity, what they share): their rack, else their leaf, else the nodes themselves."""
    topology = ctx.topology()
    racks = {topology.rack_of(n) for n in nodes}
    if len(racks) == 1 and "" not in racks:
        rack = racks.pop()
        return rack, f"all in {rack}"
    leaves = set.intersection(*({link.switch for link in topology.links_of(n, time)}
                                for n in nodes))
    if leaves:
        leaf = min(leaves)
        return leaf, f"all under {leaf}"
    return ", ".join(nodes), "in different racks"


def _report_warned(ctx: Context, event: Event, key: AttemptKey, rule: SymptomRule,
                   warned: dict[str, list[Signal]]) -> str:
    """A slow-down with heat or throttling on several of the job's nodes: the incident is
    on those nodes' rack (or leaf, or the nodes), owned as `facility_thermal` says, never
    the job's. Returns the incident the attempt is degraded in."""
    book, klass = ctx.book, "facility_thermal"
    nodes = sorted(warned)
    entity, shared = _where(ctx, nodes, event.time)
    first = min((s for signals in warned.values() for s in signals),
                key=lambda s: (s.event.time, s.event.id))
    group = f"thermal:{entity}"
    inc_id = book.open.get(group) or opening.open_incident(
        ctx, group, klass, entity, first.event.id, first.event.time, "fail-slow", event.time,
        event.observed_at)
    said = "; ".join(f"{n}: {len(warned[n])} x " + "/".join(sorted({
        s.event.type.split(".")[1] for s in warned[n]})) for n in nodes)
    book.emit(inc_id, ev.CauseUpdated(
        klass=klass, entity=entity, event_id=first.event.id, confidence=0.8,
        explanation=f"{len(nodes)} of {akey(key)}'s nodes warned of throttling or heat while "
                    f"it slowed ({rule.why}): {said}; {shared}, so the slow-down is theirs, "
                    "not the job's.", relation="node", source="infrastructure"),
        event.time, "fail-slow", f"warned:{akey(key)}")
    routing.route(ctx, inc_id, event.time, "fail-slow")
    actions.propose(ctx, inc_id, event.time, first.event, "fail-slow")
    for signals in warned.values():
        for s in signals:
            book.evidence(inc_id, s.event, "cause", s.rule.why, s.rule.name, key)
    book.evidence(inc_id, event, "symptom", rule.why, rule.name, key)
    impact.impacted(ctx, inc_id, key, event.time, "fail-slow", role="degraded")
    return inc_id


_ON_THE_NODE = frozenset({"self", "node", "gpu", "nic"})


def localise_late(ctx: Context, signal: Signal) -> None:
    """A GPU or node signal that comes while an attempt is still slow and its slow-down was
    reported as the job's own (no warning came before: DCGM's clocks read later, an
    operator's diag of the node) localises it: the attempt moves, degraded, into the node's
    incident (the slow-down is that GPU's, owned as its class says), the job-own one is
    withdrawn into it, and the time lost is charged there when the slow-down ends."""
    book = ctx.book
    if ctx.rules.klass(signal.rule.klass).group != "node" or signal.rule.weight < 1:
        return
    for key, (relation, path) in list(signal.reached.items()):
        progress = book.progress.get(key)
        if relation not in _ON_THE_NODE or progress is None or progress.slow_since is None \
                or not progress.slow_reported or not progress.slow_incident \
                or signal.event.time < progress.slow_since:
            continue
        held = book.incidents[progress.slow_incident]
        if not held.active or not held.job_scoped or held.cause_source != "job" \
                or held.cause_class != ctx.rules.progress.fail_slow.klass:
            continue
        to_id = book.open.get(signal.key) or opening.open_incident(
            ctx, signal.key, signal.rule.klass, signal.event.entity or signal.key,
            signal.event.id, signal.event.time, signal.rule.name, signal.event.time,
            signal.event.observed_at)
        entity = signal.event.entity or signal.event.node or signal.key
        slow = (signal.event.time - progress.slow_since).total_seconds() / 60
        why_signal = signal.rule.why or signal.rule.klass
        holder = path.split(" → ")[-1]
        explanation = (f"{entity} reported {signal.event.type} ({why_signal}) while "
                       f"{akey(key)} had been slow for {slow:.0f} min (since "
                       f"{progress.slow_since.isoformat()}, reported as the job's own with no "
                       f"warning before it); {holder}, one of the attempt's own, holds it: "
                       "the slow-down is there, not the job's.")
        book.emit(to_id, ev.CauseUpdated(
            klass=signal.rule.klass, entity=entity, event_id=signal.event.id,
            confidence=0.7, relation=relation, source="infrastructure",
            explanation=explanation), signal.event.time, signal.rule.name,
            f"slow-cause:{akey(key)}")
        routing.route(ctx, to_id, signal.event.time, signal.rule.name)
        actions.propose(ctx, to_id, signal.event.time, signal.event, signal.rule.name)
        book.evidence(to_id, signal.event, "cause", signal.rule.why, signal.rule.name, key)
        impact.impacted(ctx, to_id, key, signal.event.time, signal.rule.name, role="degraded")
        progress.slow_incident = to_id
        why = f"{akey(key)}'s slow-down is {entity}'s"
        if [k for k, j in held.jobs.items() if j.role in ("failed", "degraded")] == [akey(key)]:
            book.emit(held.id, ev.DiagnosisRevised(why=why, merged_into=to_id),
                      signal.event.time, signal.rule.name, f"moved:{akey(key)}:{to_id}")


def _episode_over(ctx: Context, key: AttemptKey, progress: Progress, end: datetime,
                  baseline: float) -> None:
    """A reported slow-down ended: count what it cost (cumulative over episodes)."""
    since, samples = progress.slow_since, progress.slow_samples
    progress.slow_since, progress.slow_samples = None, []
    if not progress.slow_reported or not progress.slow_incident or since is None or \
            not samples:
        progress.slow_reported = False
        return
    progress.slow_reported = False
    _charge(ctx, progress.slow_incident, key, progress, since, end, baseline,
            statistics.fmean(samples))


def _charge(ctx: Context, inc_id: str, key: AttemptKey, progress: Progress, since: datetime,
            end: datetime, normal: float, slow: float) -> None:
    """GPUs x slowed time x (1 - slow rate / normal rate); rate = 1 / step time."""
    attempt = ctx.book.attempt(key)
    gpus = (attempt.gpus or len(attempt.gpu_ids)) if attempt else 0
    slowed = (end - since).total_seconds()
    lost = gpus * slowed * max(0.0, 1 - normal / slow) / 3600 if slow > 0 else 0.0
    progress.degraded_s += slowed
    progress.degraded_gpu_hours = round(progress.degraded_gpu_hours + lost, 6)
    ctx.book.emit(inc_id, ev.ImpactAssessed(
        job=jobref(key), role="degraded", degraded_s=progress.degraded_s,
        lost_gpu_hours=progress.degraded_gpu_hours,
        why=f"{slowed / 60:.1f} min at {slow:.2f} s per step against {normal:.2f} s"),
                  end, "impact", f"degraded:{akey(key)}:{since.isoformat()}")


def attempt_ended(ctx: Context, key: AttemptKey, time: datetime) -> None:
    """The attempt ended while slow: the slow-down ends with it."""
    progress = ctx.book.progress.get(key)
    if progress is None:
        return
    cfg = ctx.rules.progress.fail_slow
    if progress.slow_since is not None and len(progress.normal) >= cfg.baseline_steps:
        baseline = statistics.median(list(progress.normal)[-cfg.baseline_steps:])
        _episode_over(ctx, key, progress, time, baseline)
    for node in list(progress.straggler):
        _straggler_over(ctx, key, progress, node, time)


def _medians(progress: Progress, minimum: int) -> dict[str, float]:
    return {node: statistics.median(series) for node, series in progress.by_node.items()
            if len(series) >= minimum}


def _straggler(ctx: Context, event: Event, key: AttemptKey, progress: Progress) -> None:
    cfg = ctx.rules.progress.fail_slow
    node = event.node
    medians = _medians(progress, cfg.baseline_steps)
    if node is None or node not in medians or len(medians) < 2:
        return
    others = statistics.median([m for n, m in medians.items() if n != node])
    recent = list(progress.by_node[node])[-cfg.baseline_steps:]
    mine = statistics.median(recent)
    if mine <= others * cfg.ratio:
        if node in progress.straggler:
            _straggler_over(ctx, key, progress, node, event.time)
        return
    since, inc_id, samples = progress.straggler.get(node, (event.time, "", []))
    samples.append(recent[-1])
    progress.straggler[node] = (since, inc_id, samples)
    if inc_id or (event.time - since).total_seconds() < cfg.for_s:
        return
    progress.straggler[node] = (since, _report_straggler(ctx, event, key, node, since, mine,
                                                         others), samples)


def _report_straggler(ctx: Context, event: Event, key: AttemptKey, node: str, since: datetime,
                      mine: float, others: float) -> str:
    """Localise to the node: its own warning when it gave one, else a straggler incident on
    it. Returns the incident the attempt is degraded in."""
    cfg = ctx.rules.progress.fail_slow
    why = (f"{node}'s ranks take {mine:.2f} s per step against {others:.2f} s on the job's "
           f"other nodes, for {cfg.for_s / 60:.0f} min")
    rule = SymptomRule.model_validate({"name": "straggler", "types": ["job.step"],
                                       "class": cfg.straggler_class, "rank": cfg.rank,
                                       "why": why})
    found = cause.find(ctx, key, event.time, since - timedelta(seconds=ctx.rules.cause_window_s),
                       node=node)
    if found is not None:
        return cause.on_symptom(ctx, event, rule, key, event.time,
                                f"straggler:{akey(key)}:{node}",
                                since - timedelta(seconds=ctx.rules.cause_window_s),
                                node=node) or ""
    inc_id = opening.open_incident(ctx, f"node:{node}", cfg.straggler_class, node,
                                   f"straggler:{akey(key)}:{node}", since, "straggler", event.time,
                                   event.observed_at)
    ctx.book.emit(inc_id, ev.CauseUpdated(
        klass=cfg.straggler_class, entity=node, confidence=0.7,
        explanation=f"No warning came from {node}, but {why}: the job waits for it at every "
                    f"step (rule straggler).", source="job"),
                  event.time, "straggler", f"straggler:{akey(key)}:{node}")

    routing.route(ctx, inc_id, event.time, "straggler")
    actions.propose(ctx, inc_id, event.time, None, "straggler")
    ctx.book.evidence(inc_id, event, "straggler", why, "straggler", key)
    impact.impacted(ctx, inc_id, key, event.time, "straggler", role="degraded")
    return inc_id


def _straggler_over(ctx: Context, key: AttemptKey, progress: Progress, node: str,
                    end: datetime) -> None:
    since, inc_id, samples = progress.straggler.pop(node)
    medians = _medians(progress, 1)
    others = [m for n, m in medians.items() if n != node]
    if inc_id and samples and others:
        _charge(ctx, inc_id, key, progress, since, end, statistics.median(others),
                statistics.fmean(samples))
