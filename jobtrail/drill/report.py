"""The drill report: each check pass/fail with its evidence (event ids and times), as JSON
and Markdown, saved under `<home>/drills/<drill id>.{json,md}` (`jobtrail drill show`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Check:
    name: str
    passed: bool
    detail: str
    evidence: list[dict[str, Any]] = field(default_factory=list)
    """`{"event_id", "type", "time", "attempt"}` (and `step`, `job_id`) of the events the
    verdict rests on."""
    basis: str = ""
    """Which records the check read (e.g. the rerun's own step lines)."""


@dataclass
class DrillReport:
    drill_id: str
    kind: str
    job_id: str
    project: str
    node: str = ""
    injected_at: str = ""
    fault: str = ""
    recovery_path: str = ""
    incident_id: str = ""
    detection_s: float | None = None
    """Injection -> the incident visible in jobtrail's store."""
    scheduler_s: float | None = None
    """Injection -> the first symptom received by jobtrail (the scheduler's and the
    workload's share: how long Slurm or the launcher took to say it)."""
    jobtrail_s: float | None = None
    """First symptom received -> incident visible (jobtrail's share; goal <= 10 s)."""
    restart_s: float | None = None
    """Injection -> the rerun started (the new attempt's, or the resubmitted job's, start)."""
    recovery_s: float | None = None
    """Injection -> the rerun logged a step past the failure step (training past the fault)."""
    failure_step: int | None = None
    restored_step: int | None = None
    """The step the rerun resumed from, as its own first step says (first step - 1)."""
    recovery_job: str = ""
    lost_gpu_hours: float | None = None
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "passed": self.passed}, indent=2, sort_keys=True,
                          default=str)

    @classmethod
    def from_json(cls, text: str) -> DrillReport:
        data = json.loads(text)
        data.pop("passed", None)
        checks = [Check(**c) for c in data.pop("checks", [])]
        return cls(**data, checks=checks)

    def to_markdown(self) -> str:
        def secs(value: float | None) -> str:
            return "n/a" if value is None else f"{value:.1f} s"

        out = [f"# Recovery drill {self.drill_id}: {'PASS' if self.passed else 'FAIL'}", "",
               "This was a drill: its incident is marked as one in the incident log.", "",
               "| | |", "| --- | --- |",
               f"| kind | {self.kind} |", f"| fault | {self.fault} |",
               f"| job | {self.project}/{self.job_id} (node {self.node or 'n/a'}) |",
               f"| injected at | {self.injected_at} |",
               f"| incident | {self.incident_id or 'none'} |",
               f"| detection (injection -> incident) | {secs(self.detection_s)} |",
               f"| scheduler/workload share (injection -> first symptom received) | "
               f"{secs(self.scheduler_s)} |",
               f"| jobtrail share (symptom received -> incident) | {secs(self.jobtrail_s)} |",
               f"| rerun started (injection -> rerun start) | {secs(self.restart_s)} |",
               f"| recovered (injection -> a step past the failure step) | "
               f"{secs(self.recovery_s)} |",
               f"| failure step / resumed from (the rerun's own steps) | "
               f"{_n(self.failure_step)} / {_n(self.restored_step)} |",
               f"| recovery path | {self.recovery_path} |",
               "| lost GPU time | " + ("n/a" if self.lost_gpu_hours is None
                                       else f"{self.lost_gpu_hours:.4f} GPU-h") + " |",
               "", "## Checks", "", "| check | result | detail | evidence | basis |",
               "| --- | --- | --- | --- | --- |"]
        for c in self.checks:
            ev = "<br>".join(f"`{e['event_id']}` {e.get('type', '')}"
                             + (f" step {e['step']}" if e.get("step") is not None else "")
                             + f" @ {e.get('time', '')}" for e in c.evidence) or "-"
            out.append(f"| {c.name} | {'pass' if c.passed else 'FAIL'} | "
                       f"{c.detail.replace('|', '/')} | {ev} | {c.basis.replace('|', '/')} |")
        if self.notes:
            out += ["", "## Notes", "", *[f"- {n}" for n in self.notes]]
        return "\n".join(out) + "\n"

    def figures(self) -> dict[str, Any]:
        """The times a drill measures, for tables over several runs."""
        return {"kind": self.kind, "passed": self.passed, "detection_s": self.detection_s,
                "scheduler_s": self.scheduler_s, "jobtrail_s": self.jobtrail_s,
                "restart_s": self.restart_s, "recovery_s": self.recovery_s,
                "recovery_path": self.recovery_path}

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{self.drill_id}.md").write_text(self.to_markdown())
        path = folder / f"{self.drill_id}.json"
        path.write_text(self.to_json())
        return path


def _n(value: int | None) -> str:
    return "n/a" if value is None else str(value)
