"""`jobtrail drill run`: the recovery drill against a live Slurm, judged from jobtrail's own
timeline and incident (never from the workload's say-so).

Submit the representative job (`workload.py`), wait until it has checkpointed and made
progress, inject one fault, then follow the collector's and the training-log shipper's
events until recovery or a deadline:
- `kill-worker`: SIGKILL the worker process (the launcher reports it and requeues);
- `node-down`: `scontrol update nodename=<its node> state=down` (Slurm requeues at once);
- `checkpoint-unwritable`: the checkpoint directory replaced by a file (root ignores file
  modes, so chmod would prove nothing): the worker dies at its next save and cannot restore,
  recovery in place fails, and the drill takes the stop / clean-up / resubmit path.
The checks and their evidence are in `report.py`; docs/drills.md says what each one means.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingest.adapters import Context, registry, run
from jobtrail.collect.slurm import DRILL_JOB_NAME, SlurmCollector
from jobtrail.collect.slurm_cursor import Sink
from jobtrail.drill.report import Check, DrillReport
from jobtrail.drill.workload import prepare
from jobtrail.store import Store
from schemas.events import Event

KINDS = ("kill-worker", "node-down", "checkpoint-unwritable")
SYMPTOMS = {"job.worker_exited", "job.failed", "job.requeued", "job.cancelled",
            "node.not_ready", "node.drained", "checkpoint.failed"}
ENDS = {"job.requeued", "job.failed", "job.cancelled", "job.timeout", "job.completed",
        "job.preempted"}


@dataclass
class Options:
    kind: str
    workdir: Path
    steps: int = 60
    checkpoint_every: int = 5
    pace_s: float = 0.25
    timeout_s: float = 180.0
    poll_s: float = 0.5


class TrainingLogShipper:
    """Ships each attempt's `train-<restarts>.log` through the training-log adapter with the
    job and attempt the file name gives (what a site's log shipper does)."""

    def __init__(self, sink: Sink, run_dir: Path, *, project: str, cluster: str,
                 job_id: Callable[[], str], drill_id: str) -> None:
        self.sink, self.run_dir, self.project, self.cluster = sink, run_dir, project, cluster
        self.drill_id = drill_id
        self.job_id = job_id
        self.offsets: dict[str, int] = {}
        self.adapter = registry()["training-log"]

    def step(self) -> int:
        sent = 0
        for path in sorted(self.run_dir.glob("train-*.log")):
            m = re.fullmatch(r"train-(\d+)\.log", path.name)
            if not m:
                continue
            with path.open("rb") as f:
                f.seek(self.offsets.get(path.name, 0))
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            if not end:
                continue
            self.offsets[path.name] = self.offsets.get(path.name, 0) + end
            ctx = Context(producer="drill-shipper", observed_at=datetime.now(UTC),
                          cluster=self.cluster, project=self.project, job_id=self.job_id(),
                          attempt=int(m.group(1)) + 1, origin=str(path))
            records = [r.model_copy(update={"attributes": {**r.attributes,
                                                          "drill": self.drill_id}})
                       if isinstance(r, Event) else r
                       for r in run(self.adapter, chunk[:end].decode("utf-8", "replace"), ctx)]
            if records:
                self.sink.submit(records)
                sent += len(records)
        return sent


def _sh(*argv: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _ev(row: dict[str, Any]) -> dict[str, Any]:
    return {"event_id": row["event_id"], "type": row["type"], "attempt": row["attempt"],
            "time": _iso(row["time"])}


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.replace(tzinfo=value.tzinfo or UTC).isoformat(timespec="milliseconds")
    return str(value)


def _epoch(value: Any) -> float:
    assert isinstance(value, datetime)
    return value.replace(tzinfo=value.tzinfo or UTC).timestamp()


class Drill:
    def __init__(self, options: Options, *, sink: Sink, store: Store,
                 collector: SlurmCollector, command: Callable[[Any], object],
                 project: str, cluster: str = "dev") -> None:
        self.o, self.sink, self.store, self.collector = options, sink, store, collector
        self.command, self.project, self.cluster = command, project, cluster
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        self.drill_id = f"drill-{options.kind}-{stamp}"
        self.run_dir = options.workdir / self.drill_id
        self.job = ""
        self.shipper = TrainingLogShipper(sink, self.run_dir, project=project, cluster=cluster,
                                          job_id=lambda: self.job, drill_id=self.drill_id)
        self.received: dict[str, float] = {}

    # --- plumbing ---------------------------------------------------------------------
    def _tick(self) -> None:
        self.collector.step()
        self.shipper.step()

    def _wait(self, what: str, check: Callable[[], Any], timeout_s: float) -> Any:
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
        launcher = prepare(self.run_dir)
        out = _sh("sbatch", "--parsable", "--requeue", f"--job-name={DRILL_JOB_NAME}",
                  f"--comment={self.drill_id}",
                  "--gres=gpu:2", f"--output={self.run_dir}/slurm-%j.out", str(launcher),
                  str(self.run_dir), str(self.o.steps), str(self.o.checkpoint_every),
                  str(self.o.pace_s))
        return out.strip().split(";")[0]

    def _incident(self, since: float, attempt: int) -> dict[str, Any] | None:
        """The incident that holds the attempt the fault was injected into (an incident
        opened only for a later attempt is not this failure detected)."""
        for row in self.store.incidents(None, since=datetime.fromtimestamp(since - 120, UTC)):
            found = self.store.incident(row["incident_id"], None)
            if found and any(j["job_id"] == self.job and j["attempt"] == attempt
                             for j in found["jobs"]):
                return found
        return None

    # --- the drill --------------------------------------------------------------------------
    def run(self) -> DrillReport:
        self.job = self._submit()
        report = DrillReport(self.drill_id, self.o.kind, self.job, self.project)
        ready = self._wait("a checkpoint and progress", lambda: self._progressed(1),
                           self.o.timeout_s)
        if not ready:
            report.notes.append("the job made no progress before the fault: nothing injected")
            report.checks.append(Check("progress before the fault", False, "no checkpoint "
                                       "and no step past it in attempt 1"))
            self._cleanup(report, "")
            return report
        attempts = self.store.attempts(self.project, self.job)
        node = attempts[0].nodes[0] if attempts and attempts[0].nodes else ""
        faulted = attempts[0].attempt if attempts else 1
        report.node = node
        t0 = self._inject(node, report)
        report.injected_at = datetime.fromtimestamp(t0, UTC).isoformat(timespec="milliseconds")
        symptom = self._wait("the first symptom", lambda: self._symptom(t0, node), 60)
        incident = self._wait("the incident", lambda: self._incident(t0, faulted), 60)
        seen = time.time()
        if incident is not None:  # when jobtrail wrote it, not when this loop looked
            held = self.store.impact_recorded_at(incident["incident_id"], self.project,
                                                 self.job, faulted)
            seen = min(seen, held.timestamp()) if held is not None else seen
        if symptom is not None:
            event = self.store.events_by_id([symptom["event_id"]]).get(symptom["event_id"])
            received = _epoch(event.observed_at) if event and event.observed_at else seen
            report.scheduler_s = round(received - t0, 2)
            if incident is not None:
                report.jobtrail_s = round(max(0.0, seen - received), 2)
        if incident is not None:
            report.incident_id = incident["incident_id"]
            report.detection_s = round(seen - t0, 2)
            self._mark(incident, report)
        recovered = self._wait("progress past the failure", lambda: self._progressed(2, True),
                               self.o.timeout_s)
        job = self.job
        if not recovered:
            job = self._resubmit(report, node)
        else:
            report.recovery_path = f"Slurm requeued job {self.job}: attempt 2 resumed"
        self._checks(report, t0, symptom, incident, job)
        if incident is not None:  # the verdict in the incident log (the incident dashboard)
            self._note(incident["incident_id"], "verdict", f"[drill] {self.drill_id}: "
                       f"{'PASS' if report.passed else 'FAIL'}; " + "; ".join(
                           f"{c.name}: {'pass' if c.passed else 'FAIL'}"
                           for c in report.checks) + f"; recovery: {report.recovery_path}")
        self._cleanup(report, node)
        return report

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
        else:
            ckpt = self.run_dir / "checkpoints"
            t0 = time.time()
            ckpt.rename(self.run_dir / "checkpoints.saved")
            ckpt.write_text("not a directory: checkpoint storage cut by the drill\n")
            report.fault = f"checkpoint directory {ckpt} made unwritable (replaced by a file)"
        return t0

    def _progressed(self, attempt: int, past_failure: bool = False) -> bool:
        rows = self._rows()
        steps = [r["attributes"].get("step") for r in rows
                 if r["type"] == "job.step" and r["attempt"] == attempt]
        saved = [r for r in rows if r["type"] == "checkpoint.saved" and r["attempt"] == 1]
        if not past_failure:
            return bool(saved) and bool(steps) and max(steps) > self.o.checkpoint_every + 1
        before = [r["attributes"].get("step") or 0 for r in rows
                  if r["type"] == "job.step" and r["attempt"] == attempt - 1]
        return bool(steps) and bool(before) and max(steps) > max(before)

    def _symptom(self, t0: float, node: str) -> dict[str, Any] | None:
        for row in self._rows():
            if row["type"] in SYMPTOMS and _epoch(row["time"]) >= t0 - 1:
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

    def _resubmit(self, report: DrillReport, node: str) -> str:
        """Recovery failed: stop the job, clean up what the fault broke, resubmit from the
        last good checkpoint, and follow the new job."""
        report.notes.append(f"recovery in place failed (no progress past the failure within "
                            f"{self.o.timeout_s:.0f} s): stop, clean up, resubmit")
        _sh("scancel", self.job)
        self._restore(node)
        old = self.job
        launcher = self.run_dir / "launch.sh"
        out = _sh("sbatch", "--parsable", "--requeue", f"--job-name={DRILL_JOB_NAME}",
                  f"--comment={self.drill_id}",
                  "--gres=gpu:2", f"--output={self.run_dir}/slurm-%j.out", str(launcher),
                  str(self.run_dir), str(self.o.steps), str(self.o.checkpoint_every),
                  str(self.o.pace_s))
        self.job = out.strip().split(";")[0]
        for name in list(self.shipper.offsets):
            self.shipper.offsets[name] = (self.run_dir / name).stat().st_size
        for log in self.run_dir.glob("train-*.log"):  # the new job's attempts start at 0
            log.rename(log.with_name(f"{old}-{log.name}"))
        self.shipper.offsets.clear()
        report.recovery_path = (f"recovery failed in place; stopped job {old}, cleaned up, "
                                f"resubmitted as job {self.job}")
        self._wait("the resubmitted job's progress", lambda: self._resumed_new(old),
                   self.o.timeout_s)
        return self.job

    def _resumed_new(self, old: str) -> bool:
        before = [r["attributes"].get("step") or 0 for r in self._rows(old)
                  if r["type"] == "job.step"]
        now = [r["attributes"].get("step") or 0 for r in self._rows() if r["type"] == "job.step"]
        return bool(now) and bool(before) and max(now) > max(before)

    def _restore(self, node: str) -> None:
        if self.o.kind == "node-down" and node:
            _sh("scontrol", "update", f"nodename={node}", "state=resume")
        saved = self.run_dir / "checkpoints.saved"
        if saved.exists():
            (self.run_dir / "checkpoints").unlink(missing_ok=True)
            saved.rename(self.run_dir / "checkpoints")

    def _cleanup(self, report: DrillReport, node: str) -> None:
        self._restore(node)
        for job in {report.job_id, self.job}:
            subprocess.run(["scancel", job], capture_output=True, timeout=30, check=False)
        if shutil.which("true") is None:  # pragma: no cover - keeps the import honest
            return

    def _checks(self, report: DrillReport, t0: float, symptom: dict[str, Any] | None,
                incident: dict[str, Any] | None, job: str) -> None:
        first = self._rows(report.job_id)
        a1 = [r for r in first if r["attempt"] == 1]
        c: list[Check] = report.checks
        c.append(Check(
            "failure detected", symptom is not None and incident is not None,
            (f"incident {report.detection_s} s after the injection (first symptom received "
             f"after {report.scheduler_s} s, incident {report.jobtrail_s} s later)")
            if incident is not None else "no incident for the job",
            [_ev(symptom)] if symptom else []))
        c.append(Check("incident within 10 s of the first symptom received",
                       report.jobtrail_s is not None and report.jobtrail_s <= 10,
                       f"jobtrail's share {report.jobtrail_s} s (goal 10 s)"))
        ends = [r for r in a1 if r["type"] in ENDS and _epoch(r["time"]) >= t0 - 1]
        c.append(Check("attempt stopped", bool(ends), f"attempt 1 ended: {ends[0]['type']}"
                       if ends else "attempt 1 has no end after the fault",
                       [_ev(r) for r in ends[:1]]))
        rows = self._rows(job)
        second = 2 if job == report.job_id else 1
        started = [r for r in rows if r["type"] == "job.started" and r["attempt"] == second]
        c.append(Check("job requeued or resubmitted", bool(started),
                       report.recovery_path if started else "no new attempt started",
                       [_ev(r) for r in started[:1]]))
        saved = [r for r in a1 if r["type"] == "checkpoint.saved" and _epoch(r["time"]) <= t0]
        restored = [r for r in rows if r["type"] == "checkpoint.restored"
                    and r["attempt"] == second]
        last = saved[-1]["attributes"].get("step") if saved else None
        got = restored[0]["attributes"].get("step") if restored else None
        c.append(Check("last checkpoint restored", got is not None and got == last,
                       f"restored step {got}, last checkpoint before the fault {last}",
                       [_ev(r) for r in saved[-1:] + restored[:1]]))
        fail_step = max([r["attributes"].get("step") or 0 for r in a1
                         if r["type"] == "job.step"], default=0)
        past = [r for r in rows if r["type"] == "job.step" and r["attempt"] == second
                and (r["attributes"].get("step") or 0) > fail_step]
        c.append(Check("progress past the failure step", bool(past),
                       f"failure at step {fail_step}; attempt {second} reached "
                       f"{max([r['attributes'].get('step') or 0 for r in past], default=0)}",
                       [_ev(r) for r in past[:1]]))
        last_old = max([_epoch(r["time"]) for r in a1 if r["type"] == "job.step"], default=0.0)
        new_start = _epoch(started[0]["time"]) if started else None
        dup_flag = any(j.get("duplicate_run") for j in (incident or {}).get("jobs", []))
        c.append(Check("no duplicate run", new_start is not None and last_old <= new_start
                       and not dup_flag,
                       f"attempt 1's last step at {_iso(datetime.fromtimestamp(last_old, UTC))}"
                       f", the new attempt started at "
                       f"{_iso(datetime.fromtimestamp(new_start, UTC)) if new_start else 'n/a'}",
                       [_ev(r) for r in started[:1]]))
        charged = 0.0
        if incident is not None:
            fresh = self.store.incident(incident["incident_id"], None) or incident
            charged = sum(float(j.get("lost_gpu_hours") or 0) for j in fresh["jobs"])
        resumed = [r for r in rows if r["type"] == "job.step" and r["attempt"] == second]
        own = self._lost_from_timeline(report, saved, resumed, a1)
        report.lost_gpu_hours = round(charged or own, 6)
        if charged:
            detail = (f"{charged:.4f} GPU-h charged by incident {report.incident_id} (GPUs x "
                      "(work since the last checkpoint + restart until progress resumed)); "
                      f"from the timeline {own:.4f} GPU-h")
        else:
            detail = (f"the incident charged nothing (it follows a job id: a resubmission is a "
                      f"new job it does not link); from the timeline {own:.4f} GPU-h (GPUs x "
                      "(fault - last checkpoint + fault -> progress resumed))")
        c.append(Check("lost GPU time", report.lost_gpu_hours > 0, detail,
                       [_ev(r) for r in saved[-1:] + past[:1]]))

    def _lost_from_timeline(self, report: DrillReport, saved: list[dict[str, Any]],
                            resumed: list[dict[str, Any]], a1: list[dict[str, Any]]) -> float:
        """DESIGN §9: GPUs x (work thrown away since the last checkpoint + restart until
        progress resumes); re-doing the thrown-away steps is not a second loss."""
        ends = [r for r in a1 if r["type"] in ENDS | {"job.worker_exited"}]
        if not (saved and resumed and ends):
            return 0.0
        attempts = self.store.attempts(self.project, report.job_id)
        gpus = attempts[0].gpus if attempts and attempts[0].gpus else 0
        failed = min(_epoch(r["time"]) for r in ends)
        thrown = failed - _epoch(saved[-1]["time"])
        overhead = _epoch(resumed[0]["time"]) - failed
        return round(gpus * max(0.0, thrown + overhead) / 3600, 6)
