"""Generating ground-truth failure stories from the failure-mode library
(`bench/failure_modes.yaml`): a training job's attempts (one to five), each failure drawn by
the shares of a published training report with its signals, symptoms and recovery, the
other jobs, red herrings, a second cluster with the same node names, and the truth
(`bench.story_truth` charges the GPU time; an attempt's own lines are `bench.story_job`'s).
`bench.stories` delivers and scores them."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from bench import story_truth
from bench.story_faults import Fault, alert, drain, inject, node_down
from bench.story_job import _complete, _Job, _progress, _start
from bench.story_model import (
    CLUSTERS,
    GPU_BUS,
    PROJECT,
    T0,
    Run,
    Story,
    Truth,
    attempt_key,
    kernel,
    node,
    port,
    slurmctld,
)
from bench.story_modes import Mode, library

HORIZON = timedelta(hours=12)
def _fault_time(rng: random.Random, job: _Job, run: Run, saves_before: int,
                in_save: bool) -> datetime:
    """When the fault strikes `run`: after `saves_before` of its own saves (so a checkpoint
    exists), between two steps; or (`in_save`) while its second save is being written."""
    per = job.ckpt_every // 10
    first = run.start + timedelta(seconds=150)  # its first step (see `_progress`)
    if in_save:  # the save of step 2 x ckpt_every starts 2 s after it, ends 5 s later
        return first + (2 * per - 1) * job.step_every + timedelta(seconds=2 + rng.randint(1, 4))
    k = rng.randint(max(3, saves_before * per), max(4, (saves_before + 1) * per + 1))
    return first + (k - 1) * job.step_every + timedelta(
        seconds=rng.randint(10, int(job.step_every.total_seconds()) - 10))


def _end(story: Story, rng: random.Random, run: Run, f: Fault) -> None:
    """The scheduler ends the attempt the way the mode does."""
    c, mode = run.cluster, f.mode
    job_fields = {"job_id": run.job, "attempt": run.attempt}
    if mode.ends == "preempted":
        run.end, run.outcome, run.requeued = f.at, "preempted", True
        by = str(int(run.job) + 500)
        story.add("slurmctld", "job.preempted", f.at, c, **job_fields,
                  attributes={"reason": "PREEMPTED", "by_job": by})
        story.add("slurmctld", "job.requeued", f.at + timedelta(seconds=1), c, **job_fields,
                  attributes={"reason": "PREEMPTED"})
        slurmctld(story, c, f.at, f"preempted JobId={run.job} has been requeued to reclaim "
                  f"resources for JobId={by}")
        high = Run(c, by, 1, list(run.nodes), f.at, f.at + timedelta(seconds=1))
        _start(story, _Job(rng, by, high.nodes, high.start, c), high, submit=False)
        _complete(story, high, f.at + timedelta(minutes=rng.randint(3, 8)))
    elif mode.ends == "node_fail":
        last = max([f.at, *f.signals, *f.symptoms])
        run.end, run.outcome, run.requeued = last + timedelta(seconds=rng.randint(
            30, 200)), "node_fail", True
        story.add("slurmctld", "job.requeued", run.end, c, **job_fields,
                  attributes={"reason": "NODE_FAIL", "failed_nodes": [node(f.culprit)]})
        slurmctld(story, c, run.end, f"Requeuing JobId={run.job} due to failure of node "
                  f"{node(f.culprit)}")
    else:
        last = max([f.at, *f.symptoms])
        run.end, run.outcome = last + timedelta(seconds=rng.randint(30, 120)), "failed"
        story.add("slurmctld", "job.failed", run.end, c, **job_fields,
                  attributes={"exit_code": 1, "reason": "NonZeroExitCode"})
        slurmctld(story, c, run.end, f"_job_complete: JobId={run.job} WEXITSTATUS 1")
        slurmctld(story, c, run.end + timedelta(milliseconds=1),
                  f"_job_complete: JobId={run.job} done")
        if mode.restart == "requeue":
            run.requeued = True
            story.add("slurmctld", "job.requeued", run.end + timedelta(seconds=1), c,
                      **job_fields, attributes={"reason": "REQUEUED"})
            slurmctld(story, c, run.end + timedelta(seconds=1),
                      f"_job_complete: requeue JobId={run.job} per user/system request")
    run.symptom = min([*f.symptoms, run.end])


def _failures(rng: random.Random, pattern: str, first: Mode | None) -> list[Mode]:
    lib = library()
    where = {"crash_loop": "hardware", "resubmit_new_id": "own"}.get(pattern, "any")
    pool_ok = (lambda m: m.restart == "requeue" and m.ends != "preempted") \
        if pattern.startswith("fallback") else (lambda m: True)
    modes = [first] if first else []
    while not modes or not pool_ok(modes[0]):
        modes = [lib.draw(rng, where)]
    if pattern == "crash_loop":
        return modes * 3
    if pattern == "chain":
        for _ in range(rng.randint(1, 3)):
            drawn = lib.draw(rng)
            while drawn.truth.entity == "target" and any(
                    m.truth.entity == "target" for m in modes):
                drawn = lib.draw(rng)
            modes.append(drawn)
    return modes


def generate(seed: int, mode: str | None = None, pattern: str | None = None) -> Story:
    """One story; `mode` forces the first failure's mode, `pattern` the attempts' pattern."""
    rng = random.Random(seed)
    lib = library()
    pattern = pattern or lib.pattern(rng)
    forced = lib.mode(mode) if mode else None
    if forced and pattern == "crash_loop" and not (
            forced.truth.entity == "gpu" and forced.signals and forced.signals[-1].kind == "xid"):
        pattern = "single"
    if forced and pattern == "resubmit_new_id" and forced.restart != "manual":
        pattern = "single"
    if forced and pattern.startswith("fallback") and (
            forced.restart != "requeue" or forced.ends == "preempted"):
        pattern = "single"
    modes = _failures(rng, pattern, forced)
    story = Story(seed, modes[0].name, modes[0].truth.klass, pattern)
    racks = rng.sample(range(4), 3)
    first = racks[0] * 16 + 1 + rng.randrange(0, 8)
    size = rng.choice((2, 4, 8))
    base = 40000 + 10 * seed
    victim = _Job(rng, str(base), list(range(first, first + size)),
                  T0 + timedelta(minutes=rng.randint(0, 10)))
    others = []
    for i, rack in enumerate(racks[1:rng.randint(1, 3)]):
        low = rack * 16 + 1 + rng.randrange(0, 8)
        others.append(_Job(rng, str(base + 1 + i), list(range(low, low + rng.choice((2, 4)))),
                           T0 + timedelta(minutes=rng.randint(0, 10))))
    busy = set(victim.nodes) | {n for o in others for n in o.nodes}
    end = _victim(story, rng, victim, modes, pattern, busy)
    for other in others:
        run = Run(other.cluster, other.job, 1, other.nodes, other.start, other.start)
        _start(story, other, run, submit=True)
        _progress(story, other, run, end)
        _complete(story, run, end)
    first_fault = story.fault_times[0]
    _herrings(story, rng, busy, victim.nodes, first_fault)
    if rng.random() < 0.3:
        _second_cluster(story, rng, victim, first_fault, end)
    story.events.sort(key=lambda se: (se[1].time, se[1].id))
    return story


def _spares(rng: random.Random, busy: set[int], count: int) -> list[int]:
    spare = [n for n in range(1, 65) if n not in busy]
    start = rng.randrange(0, len(spare) - count)
    return sorted(spare[start:start + count])


def _victim(story: Story, rng: random.Random, job: _Job, modes: list[Mode], pattern: str,
            busy: set[int]) -> datetime:
    """The victim's attempts through every failure to a recovered last attempt; returns
    when the story's other jobs end."""
    run = Run(job.cluster, job.job, 1, job.nodes, job.start - timedelta(seconds=30),
              job.start)
    _start(story, job, run, submit=True)
    story.lineage.append(run)
    faults: list[Fault] = []
    crash = pattern == "crash_loop"
    culprit, failure_steps = rng.choice(job.nodes), []
    for i, mode in enumerate(modes):
        saves = 2 if pattern == "fallback_restore_failed" and i == 0 else (1 if i == 0 else 0)
        in_save = pattern == "fallback_unfinished" and i == 0
        at = _fault_time(rng, job, run, saves, in_save)
        _progress(story, job, run, at)
        if not crash or i == 0:
            culprit = rng.choice(run.nodes)
        # a crash loop: the same bad GPU every time
        fault = inject(story, rng, mode, run, culprit, at, faults[0].gpu if crash and faults
                       else None)
        faults.append(fault)
        story.fault_times.append(at)
        _end(story, rng, run, fault)
        failure_steps.append(run.last_step())
        if mode.drain and not crash:
            assert run.end is not None  # `_end` ended it
            reason = mode.drain.format(xid=fault.xid, gpu=fault.gpu)
            drain(story, run.cluster, culprit, run.end + timedelta(seconds=30), reason,
                  fault.xid or None)
        busy |= set(run.nodes)
        run = _restart(story, rng, job, run, mode, pattern if i == 0 else "", busy, crash)
        story.lineage.append(run)
    last = max(failure_steps) + 30
    until = run.start + timedelta(seconds=150) + job.step_every * (
        (last - (run.restored or 0)) // 10 + 1)
    _progress(story, job, run, until)
    _complete(story, run, until)
    _truths(story, faults, pattern, crash)
    return until + timedelta(minutes=5)


def _restart(story: Story, rng: random.Random, job: _Job, run: Run, mode: Mode, pattern: str,
             busy: set[int], crash: bool) -> Run:
    """The next attempt: requeued by the cluster, or resubmitted by its owner."""
    c = run.cluster
    assert run.end is not None
    saved = [s for r in story.lineage for s in r.saves if s.finished is not None]
    restored = saved[-1].step if saved else None
    failed_load = None
    if pattern == "fallback_restore_failed" and len(saved) >= 2:
        failed_load, restored = saved[-1].step, saved[-2].step
    nodes = list(run.nodes) if crash else _spares(rng, busy, len(run.nodes))
    after = "preemption" if mode.ends == "preempted" else "failure"
    if run.requeued:
        pending = run.end + timedelta(seconds=2)
        reason = "Priority" if mode.ends == "preempted" or rng.random() < 0.5 else "Resources"
        run.pending.append((pending, reason))
        story.add("slurmctld", "job.pending", pending, c, job_id=run.job,
                  attempt=run.attempt + 1, attributes={"reason": reason})
        start = run.end + timedelta(minutes=rng.randint(2, 12))
        nxt = Run(c, run.job, run.attempt + 1, nodes, pending, start, after)
        submit = False
    else:
        resubmit = run.end + timedelta(minutes=rng.randint(20, 120))
        new_id = pattern == "resubmit_new_id"
        nxt = Run(c, str(int(job.job) + 7) if new_id else run.job,
                  1 if new_id else run.attempt + 1, nodes, resubmit,
                  resubmit + timedelta(seconds=rng.randint(30, 180)), after)
        if not new_id:
            slurmctld(story, c, resubmit, f"Requeuing JobId={run.job}")
        submit = True
    nxt.restored, nxt.restore_failed = restored, failed_load
    _start(story, job, nxt, submit)
    return nxt


def _truths(story: Story, faults: list[Fault], pattern: str, crash: bool) -> None:
    charged = story_truth.charges(story.lineage)
    groups = [faults] if crash else [[f] for f in faults]
    for group in groups:
        mode = group[0].mode
        owner = f"project:{PROJECT}" if mode.job_own else mode.truth.owner
        loss = round(sum(charged.get(f.run.key, 0.0) for f in group), 6)
        story.truth.append(Truth(mode.truth.klass, group[0].entity(), owner,
                                 tuple(sorted(f.run.key for f in group)), loss, "verified",
                                 mode.name, group[0].run.cluster, pattern))
    if crash:
        story.truth.append(Truth("repeat_offender", node(faults[0].culprit), "hardware-ops",
                                 (), None, "", faults[0].mode.name, pattern=pattern))
    for r in story.runs:
        if r.restore_failed is not None:  # the broken checkpoint: its own incident
            story.truth.append(Truth("checkpoint", r.key, f"project:{PROJECT}", (r.key,),
                                     None, "", "checkpoint-restore", r.cluster, pattern))


def _herrings(story: Story, rng: random.Random, busy: set[int], victim: list[int],
              at: datetime) -> None:
    c = CLUSTERS[0]
    idle = [n for n in range(1, 65) if n not in busy and all(
        n not in r.nodes for r in story.runs)]
    if rng.random() < 0.5:  # a fault on an idle node: its own incident, no job
        n, g = rng.choice(idle), rng.randrange(8)
        when = at - timedelta(minutes=rng.randint(5, 30))
        story.add(f"dmesg:{node(n)}", "node.xid", when, c, scope="gpu",
                  entity=f"{node(n)}/gpu{g}", node=node(n), attributes={"xid": 79, "gpu": str(g)})
        kernel(story, c, n, when, f"NVRM: Xid (PCI:0000:{GPU_BUS[g]}:00): 79, "
               "pid=2231, name=python, GPU has fallen off the bus.")
        story.truth.append(Truth("gpu_hardware", f"{node(n)}/gpu{g}", "hardware-ops", (),
                                 mode="idle-xid"))
        story.herrings.append("idle-xid")
    if rng.random() < 0.4:  # a counter tick on the victim's own leaf port, minutes before
        n = rng.choice(victim)
        _tick(story, n, at - timedelta(minutes=rng.randint(2, 8)))
        story.herrings.append("near-counter-tick")
    if rng.random() < 0.3:  # planned work: a maintenance drain and reboot of an idle node
        n = rng.choice(idle)
        when = at - timedelta(minutes=rng.randint(10, 40))
        drain(story, c, n, when, "maintenance: firmware update CHG-4711")
        node_down(story, c, n, when + timedelta(minutes=5))
        story.herrings.append("planned-work")
    if rng.random() < 0.3:  # a link counter tick far from the failure on another leaf
        _tick(story, rng.choice(idle), at - timedelta(minutes=40))
        story.herrings.append("far-counter-tick")


def _tick(story: Story, n: int, at: datetime) -> None:
    switch, p = port(n).split("/")
    story.add("fabric", "network.link_errors", at, CLUSTERS[0], scope="port", entity=port(n),
              attributes={"switch": switch, "port": p, "counter": "symbol_errors",
                          "value": 2.0})
    alert(story, CLUSTERS[0], "IBLinkErrors", {"switch": switch, "port": p}, at, None)


def _second_cluster(story: Story, rng: random.Random, victim: _Job, at: datetime,
                    end: datetime) -> None:
    """cluster-b, whose nodes have the same names: a job on the victim's node names, and
    (sometimes) a GPU fault on one of them that only cluster-b's idle node had."""
    c = CLUSTERS[1]
    shared = rng.choice(victim.nodes)
    faulty = rng.random() < 0.6
    nodes = [n for n in victim.nodes if n != shared] if faulty else list(victim.nodes)
    twin = _Job(rng, str(70000 + 10 * story.seed), nodes, victim.start, c)
    run = Run(c, twin.job, 1, nodes, twin.start - timedelta(seconds=30), twin.start)
    _start(story, twin, run, submit=True)
    _progress(story, twin, run, end)
    _complete(story, run, end)
    story.herrings.append("second-cluster")
    if faulty:
        g = rng.randrange(8)
        when = at - timedelta(minutes=rng.randint(2, 12))
        story.add(f"dmesg:{node(shared)}", "node.xid", when, c, scope="gpu",
                  entity=f"{node(shared)}/gpu{g}", node=node(shared),
                  attributes={"xid": 79, "gpu": str(g)})
        kernel(story, c, shared, when, f"NVRM: Xid (PCI:0000:{GPU_BUS[g]}:00): 79, "
               "pid=2231, name=python, GPU has fallen off the bus.")
        story.truth.append(Truth("gpu_hardware", f"{node(shared)}/gpu{g}", "hardware-ops", (),
                                 mode="other-cluster-xid", cluster=c))
        story.herrings.append("same-name-fault")


__all__ = ["CLUSTERS", "HORIZON", "PROJECT", "T0", "Story", "Truth", "attempt_key",
           "generate"]
