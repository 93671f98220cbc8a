"""`jobtrail drill run`: the recovery drill against a live Slurm, judged from jobtrail's own
timeline and incident (never from the workload's say-so).

Submit the representative job (`workload.py`), wait until it has checkpointed and made
progress, inject one fault, then follow the collector's and the training-log shipper's
events until recovery or a deadline:
- `kill-worker`: SIGKILL the worker process (the launcher reports it and requeues);
- `node-down`: `scontrol update nodename=<its node> state=down` (Slurm requeues at once);
- `checkpoint-unwritable`: the checkpoint directory replaced by a file (root ignores file
  modes, so chmod would prove nothing): the worker dies at its next save and cannot restore,
  recovery in place fails, and the drill takes the stop / clean-up / resubmit path;
- `network-partition`: the job's two ranks run in network namespaces joined by a veth pair
  (`network.py`); rank 0's end goes down, both ranks' collectives time out (the watchdog
  line in the job's log), the launcher requeues, and the drill restores the link once the
  attempt has stopped.
With `requeue=False` the job is made unrequeueable first (`scontrol update jobid=N
requeue=0`): recovery in place cannot happen, the drill reports it and takes the stop /
clean-up / resubmit path. The checks are `checks.py`'s; docs/drills.md says what each means.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobtrail.collect.slurm import SlurmCollector
from jobtrail.collect.slurm_cursor import Sink
from jobtrail.collect.slurm_lines import DRILL_JOB_NAME
from jobtrail.drill import network
from jobtrail.drill.checks import ENDS, SYMPTOMS, Facts, Fallback, epoch, judge
from jobtrail.drill.report import Check, DrillReport
from jobtrail.drill.shipper import TrainingLogShipper
from jobtrail.drill.workload import prepare
from jobtrail.store import Store

KINDS = ("kill-worker", "node-down", "checkpoint-unwritable", "network-partition")
SABOTAGES = ("", "restart-from-scratch")
"""`restart-from-scratch`: after the fault every checkpoint keeps its name but holds step 0,
so the rerun restores "the last checkpoint" and starts over at step 1 (tests: the drill must
fail it)."""

__all__ = ["KINDS", "SABOTAGES", "Drill", "Options", "TrainingLogShipper"]


@dataclass
class Options:
    kind: str
    workdir: Path
    steps: int = 60
    checkpoint_every: int = 5
    pace_s: float = 0.25
    timeout_s: float = 180.0
    poll_s: float = 0.5
    requeue: bool = True
    """False: `scontrol update jobid=N requeue=0` before the fault (cannot recover in place)."""
    collective_timeout_s: float = 5.0
    sabotage: str = ""


def _sh(*argv: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _quiet(*argv: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    return done.stdout if done.returncode == 0 else ""


class Drill:
    def __init__(self, options: Options, *, sink: Sink, store: Store,
                 collector: SlurmCollector, command: Callable[[Any], object],
                 project: str, cluster: str = "dev") -> None:
        if options.kind not in KINDS:
            raise ValueError(f"kind {options.kind!r}: one of {', '.join(KINDS)}")
        if options.sabotage not in SABOTAGES:
            raise ValueError(f"sabotage {options.sabotage!r}: one of {SABOTAGES[1:]}")
        self.o, self.sink, self.store, self.collector = options, sink, store, collector
        self.command, self.project, self.cluster = command, project, cluster
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        self.drill_id = f"drill-{options.kind}-{stamp}"
        self.run_dir = options.workdir / self.drill_id
        self.job = ""
        self.shipper = TrainingLogShipper(sink, self.run_dir, project=project, cluster=cluster,
                                          job_id=lambda: self.job, drill_id=self.drill_id)
        self.pair = network.Pair.named(self.drill_id) \
            if options.kind == "network-partition" else None

    # --- plumbing ---------------------------------------------------------------------
    def _tick(self) -> None:
        self.collector.step()
        self.shipper.step()

    def _wait(self, check: Callable[[], Any], timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            self._tick()
            found = check()
            if found:
                return found
            if time.monotonic() > deadline:
                return None
            time.sleep(self.o.poll_s)

    def _rows(self, job: str | None = None) -> list[dict[str, Any]]:
        return self.store.timeline(self.project, job or self.job)

    def _submit(self) -> str:
        launcher = self.run_dir / "launch.sh"
        args = [str(self.run_dir), str(self.o.steps), str(self.o.checkpoint_every),
                str(self.o.pace_s)]
        if self.pair is not None:
            args += [self.pair.ns0, self.pair.ns1, self.pair.rendezvous,
                     str(self.o.collective_timeout_s)]
        out = _sh("sbatch", "--parsable", "--requeue", f"--job-name={DRILL_JOB_NAME}",
                  f"--comment={self.drill_id}", "--gres=gpu:2",
                  f"--output={self.run_dir}/slurm-%j.out", str(launcher), *args)
        return out.strip().split(";")[0]

    def _incident(self, attempt: int) -> dict[str, Any] | None:
        """The incident that holds the attempt the fault was injected into as failed (an
        incident opened only for a later attempt is not this failure detected, a standing
        one that only links it is not its incident). Whenever it was opened: the fault can
        join an incident already open on its node."""
        for row in self.store.incidents([self.project]):
            found = self.store.incident(row["incident_id"], None)
            if found and any(j["job_id"] == self.job and j["attempt"] == attempt
                             and j.get("role", "failed") == "failed" for j in found["jobs"]):
                return found
        return None

    # --- the drill --------------------------------------------------------------------------
    def run(self) -> DrillReport:
        prepare(self.run_dir)
        report = DrillReport(self.drill_id, self.o.kind, "", self.project)
        node = ""
        try:
            if self.pair is not None:
                network.create(self.pair)
            self.job = report.job_id = self._submit()
            ready = self._wait(lambda: self._progressed(1), self.o.timeout_s)
            if not ready:
                report.notes.append("the job made no progress before the fault: nothing "
                                    "injected")
                report.checks.append(Check("progress before the fault", False, "no checkpoint "
                                           "and no step past it in attempt 1"))
                return report
            attempts = self.store.attempts(self.project, self.job)
            node = attempts[0].nodes[0] if attempts and attempts[0].nodes else ""
            report.node = node
            if not self.o.requeue:
                _sh("scontrol", "update", f"jobid={self.job}", "requeue=0")
                report.notes.append(f"job {self.job} made unrequeueable before the fault "
                                    f"(scontrol update jobid={self.job} requeue=0)")
            self._drill(report, node, attempts[0].gpus if attempts else 0)
        finally:
            self._cleanup(report, node)
        return report

    def _drill(self, report: DrillReport, node: str, gpus: int) -> None:
        faulted = 1
        t0 = self._inject(node, report)
        report.injected_at = datetime.fromtimestamp(t0, UTC).isoformat(timespec="milliseconds")
        if self.o.sabotage == "restart-from-scratch":
            self._start_over(report)
        symptom = self._wait(lambda: self._symptom(t0), 60)
        incident = self._wait(lambda: self._incident(faulted), 60)
        seen = time.time()
        if incident is not None:  # when jobtrail wrote it, not when this loop looked
            held = self.store.impact_recorded_at(incident["incident_id"], self.project,
                                                 self.job, faulted)
            seen = min(seen, held.timestamp()) if held is not None else seen
        if symptom is not None:
            event = self.store.events_by_id([symptom["event_id"]]).get(symptom["event_id"])
            received = epoch(event.observed_at) if event and event.observed_at else seen
            report.scheduler_s = round(received - t0, 2)
            if incident is not None:
                report.jobtrail_s = round(max(0.0, seen - received), 2)
        if incident is not None:
            report.incident_id = incident["incident_id"]
            report.detection_s = round(seen - t0, 2)
            self._mark(incident, report)
        if self.pair is not None:  # the network team's fix, once the attempt has stopped
            self._wait(lambda: self._ended(faulted, t0), 60)
            network.restore(self.pair)
            report.notes.append("the drill restored the link once attempt 1 had stopped (a "
                                "site's requeue would also land on healthy nodes)")
        outcome = self._wait(lambda: self._settled(faulted, t0), self.o.timeout_s)
        fallback = None
        if outcome == "recovered":
            report.recovery_path = f"Slurm requeued job {self.job}: a later attempt resumed"
        else:
            why = (f"job {self.job} ended without a requeue" if outcome == "ended" else
                   f"recovery in place failed (no progress past the failure within "
                   f"{self.o.timeout_s:.0f} s)")
            report.notes.append(f"{why}: stop, clean up, resubmit")
            fallback = self._resubmit(report, node, why)
        first = self._rows(report.job_id)
        recovery = self._rows(self.job)
        charged = 0.0
        if incident is not None:
            fresh = self.store.incident(incident["incident_id"], None) or incident
            charged = sum(float(j.get("lost_gpu_hours") or 0) for j in fresh["jobs"])
            incident = fresh
        verdict = judge(Facts(
            report.job_id, t0, first, recovery, self.job, symptom=symptom, incident=incident,
            detection_s=report.detection_s, scheduler_s=report.scheduler_s,
            jobtrail_s=report.jobtrail_s, charged_gpu_hours=charged, gpus=gpus,
            fallback=fallback, faulted=faulted))
        report.checks += verdict.checks
        report.restart_s, report.recovery_s = verdict.restart_s, verdict.recovery_s
        report.failure_step, report.restored_step = verdict.failure_step, verdict.restored_step
        report.lost_gpu_hours, report.recovery_job = verdict.lost_gpu_hours, self.job
        if incident is not None:  # the verdict in the incident log (the incident dashboard)
            self._note(incident["incident_id"], "verdict", f"[drill] {self.drill_id}: "
                       f"{'PASS' if report.passed else 'FAIL'}; " + "; ".join(
                           f"{c.name}: {'pass' if c.passed else 'FAIL'}"
                           for c in report.checks) + f"; recovery: {report.recovery_path}")

    def _inject(self, node: str, report: DrillReport) -> float:
        if self.o.kind == "kill-worker":
            pid = int((self.run_dir / "worker-0.pid").read_text())
            t0 = time.time()
            os.kill(pid, signal.SIGKILL)
            report.fault = f"SIGKILL to worker pid {pid} on {node}"
        elif self.o.kind == "node-down":
            t0 = time.time()
            _sh("scontrol", "update", f"nodename={node}", "state=down",
                f"reason=jobtrail {self.drill_id}")
            report.fault = f"scontrol update nodename={node} state=down"
        elif self.o.kind == "network-partition":
            assert self.pair is not None
            t0 = time.time()
            report.fault = network.cut(self.pair)
        else:
            ckpt = self.run_dir / "checkpoints"
            t0 = time.time()
            ckpt.rename(self.run_dir / "checkpoints.saved")
            ckpt.write_text("not a directory: checkpoint storage cut by the drill\n")
            report.fault = f"checkpoint directory {ckpt} made unwritable (replaced by a file)"
        return t0

    def _start_over(self, report: DrillReport) -> None:
        """The sabotage: every checkpoint keeps its name and now holds step 0."""
        for path in sorted((self.run_dir / "checkpoints").glob("step_*.json")):
            path.write_text(json.dumps({"step": 0}))
        report.notes.append("sabotaged: every checkpoint keeps its name but holds step 0 "
                            "(the rerun restores it and starts over at step 1)")

    def _progressed(self, attempt: int) -> bool:
        rows = self._rows()
        steps = [r["attributes"].get("step") or 0 for r in rows
                 if r["type"] == "job.step" and r["attempt"] == attempt]
        saved = [r for r in rows if r["type"] == "checkpoint.saved" and r["attempt"] == attempt]
        return bool(saved) and bool(steps) and max(steps) > self.o.checkpoint_every + 1

    def _ended(self, attempt: int, t0: float) -> bool:
        return any(r["type"] in ENDS | {"job.worker_exited"} and r["attempt"] == attempt
                   and epoch(r["time"]) >= t0 - 1 for r in self._rows())

    def _settled(self, faulted: int, t0: float) -> str | None:
        """"recovered": a later attempt logged a step past the faulted one's last; "ended":
        the job's last attempt ended for good (no requeue followed it); None: not yet."""
        rows = self._rows()
        before = [r["attributes"].get("step") or 0 for r in rows
                  if r["type"] == "job.step" and r["attempt"] == faulted]
        later = [r["attributes"].get("step") or 0 for r in rows
                 if r["type"] == "job.step" and r["attempt"] > faulted]
        if later and before and max(later) > max(before):
            return "recovered"
        last = max((r["attempt"] for r in rows if r["type"] == "job.started"), default=faulted)
        final = [r for r in rows if r["attempt"] == last and r["type"] in ENDS - {"job.requeued"}
                 and epoch(r["time"]) >= t0 - 1]
        requeued = [r for r in rows if r["attempt"] == last and r["type"] == "job.requeued"]
        return "ended" if final and not requeued else None

    def _symptom(self, t0: float) -> dict[str, Any] | None:
        for row in self._rows():
            if row["type"] in SYMPTOMS and epoch(row["time"]) >= t0 - 1:
                return row
        return None

    def _mark(self, incident: dict[str, Any], report: DrillReport) -> None:
        """Record in the incident log that this incident is a drill (and pages nobody)."""
        self._note(incident["incident_id"], "mark", f"[drill] {self.drill_id}: a recovery "
                   f"drill ({self.o.kind}: {report.fault}) injected at {report.injected_at}; "
                   "not a real failure: pages nobody, excluded from fleet figures")

    def _note(self, incident_id: str, what: str, text: str) -> None:
        from processors.incidents.model import Actor, Command

        self.command(Command(command_id=f"{self.drill_id}-{what}", incident_id=incident_id,
                             command="note", actor=Actor(kind="processor",
                                                         name="jobtrail-drill"),
                             time=datetime.now(UTC), data={"text": text[:2000],
                                                           "projects": [self.project]}))

    # --- stop, clean up, resubmit -------------------------------------------------------------
    def _resubmit(self, report: DrillReport, node: str, why: str) -> Fallback:
        """Recovery in place failed: stop what is left of the job, clean up what the fault
        broke, resubmit from the last good checkpoint, and follow the new job."""
        old = self.job
        _quiet("scancel", old)
        left = self._wait(lambda: not self._running(old), 60) is not None
        stopped = f"job {old} " + ("has nothing left running (squeue)" if left
                                   else "still runs after scancel")
        self._restore(node)
        cleaned, cleaned_detail = self._clean(node)
        for log in self.run_dir.glob("train-*.log"):  # the new job's attempts start at 0
            log.rename(log.with_name(f"{old}-{log.name}"))
        self.shipper.offsets.clear()
        self.job = self._submit()
        report.recovery_path = (f"recovery in place failed; stopped job {old}, cleaned up, "
                                f"resubmitted as job {self.job}")
        self._wait(lambda: self._resumed_new(old), self.o.timeout_s)
        return Fallback(why, left, stopped, cleaned, cleaned_detail, self.job)

    def _running(self, job: str) -> bool:
        text = _quiet("squeue", "-h", "-j", job, "-o", "%T")
        return any(s in text for s in ("RUNNING", "PENDING", "COMPLETING", "CONFIGURING"))

    def _clean(self, node: str) -> tuple[bool, str]:
        said = []
        ok = True
        if self.o.kind == "node-down" and node:
            state = _quiet("sinfo", "-h", "-n", node, "-o", "%t").strip()
            ok &= bool(state) and "down" not in state and "drain" not in state
            said.append(f"node {node} is {state or 'unknown'} (sinfo)")
        ckpt = self.run_dir / "checkpoints"
        ok &= ckpt.is_dir()
        said.append(f"{ckpt.name} is {'a directory' if ckpt.is_dir() else 'not a directory'}")
        if self.pair is not None:
            up = network.is_up(self.pair)
            ok &= up
            said.append(f"link {self.pair.dev0} {'up' if up else 'down'}")
        return ok, ", ".join(said)

    def _resumed_new(self, old: str) -> bool:
        before = [r["attributes"].get("step") or 0 for r in self._rows(old)
                  if r["type"] == "job.step"]
        now = [r["attributes"].get("step") or 0 for r in self._rows() if r["type"] == "job.step"]
        return bool(now) and bool(before) and max(now) > max(before)

    def _restore(self, node: str) -> None:
        if self.o.kind == "node-down" and node:
            _quiet("scontrol", "update", f"nodename={node}", "state=resume")
        saved = self.run_dir / "checkpoints.saved"
        if saved.exists():
            (self.run_dir / "checkpoints").unlink(missing_ok=True)
            saved.rename(self.run_dir / "checkpoints")
        if self.pair is not None:
            network.restore(self.pair)

    def _cleanup(self, report: DrillReport, node: str) -> None:
        self._restore(node)
        for job in {report.job_id, self.job} - {""}:
            subprocess.run(["scancel", job], capture_output=True, timeout=30, check=False)
        if self.pair is not None:
            deadline = time.monotonic() + 30  # the ranks leave their namespaces first
            while time.monotonic() < deadline and any(self._running(j) for j in
                                                      {report.job_id, self.job} - {""}):
                time.sleep(0.5)
            network.destroy(self.pair)
