"""Every drill check can fail: the verdict (jobtrail/drill/checks.py) on a recovery that went
right, then on one sabotage per check, each failing that check (and saying why). The rows are
shaped like `Store.timeline`'s; the live drills are tests/integration/test_slurm_drill.py."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobtrail.drill.checks import TIMED, Facts, Fallback, judge

T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


def _at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def _row(type_: str, s: float, attempt: int, job: str = "7", **attributes: Any) -> dict[str, Any]:
    return {"event_id": f"{job}-{attempt}-{type_}-{s}", "type": type_, "attempt": attempt,
            "time": _at(s), "job_id": job, "attributes": attributes}


def _run(job: str = "7") -> list[dict[str, Any]]:
    """Attempt 1: steps 1..12, checkpoints at 5 and 10, killed at t=13; attempt 2 starts at
    t=40, restores step 10 and logs 11..20."""
    rows = [_row("job.started", 0, 1, job, nodes=["n1"], gpus=2)]
    for n in range(1, 13):
        rows.append(_row("job.step", n, 1, job, step=n))
        if n % 5 == 0:
            rows.append(_row("checkpoint.saved", n + 0.1, 1, job, step=n))
    rows += [_row("job.worker_exited", 13.1, 1, job), _row("job.requeued", 13.2, 1, job,
                                                           reason="REQUEUED"),
             _row("job.started", 40, 2, job, nodes=["n1"], gpus=2),
             _row("checkpoint.restored", 40.5, 2, job, step=10)]
    rows += [_row("job.step", 40 + n - 10, 2, job, step=n) for n in range(11, 21)]
    return rows


def _facts(rows: list[dict[str, Any]] | None = None, **over: Any) -> Facts:
    rows = rows if rows is not None else _run()
    incident = {"incident_id": "inc-1", "jobs": [{"job_id": "7", "attempt": 1,
                                                 "duplicate_run": False}]}
    base: dict[str, Any] = dict(
        job_id="7", t0=_at(13).timestamp(), first=rows, recovery=rows, recovery_job="7",
        symptom=next(r for r in rows if r["type"] == "job.worker_exited"), incident=incident,
        detection_s=0.2, scheduler_s=0.1, jobtrail_s=0.1, charged_gpu_hours=0.02, gpus=2)
    base.update(over)
    return Facts(**base)


def _verdict(facts: Facts) -> dict[str, Any]:
    return {c.name: c for c in judge(facts).checks}


def test_a_recovery_that_went_right_passes_every_check() -> None:
    v = judge(_facts())
    assert [c.name for c in v.checks if not c.passed] == []
    assert (v.restart_s, v.recovery_s) == (27.0, 30.0)  # the rerun's start; its step 13
    assert (v.failure_step, v.restored_step, v.first_rerun_step) == (12, 10, 11)
    assert all(c.basis for c in v.checks)


def _without(types: set[str], attempt: int) -> Callable[[list[dict[str, Any]]], None]:
    def cut(rows: list[dict[str, Any]]) -> None:
        rows[:] = [r for r in rows if not (r["type"] in types and r["attempt"] == attempt)]
    return cut


def _started_over(rows: list[dict[str, Any]]) -> None:
    """The checkpoint's name is intact (the restore line says step 10) but the rerun logs
    step 1 on: it started over."""
    rerun = [r for r in rows if r["type"] == "job.step" and r["attempt"] == 2]
    for i, r in enumerate(rerun):
        r["attributes"]["step"] = i + 1


def _fell_back(rows: list[dict[str, Any]]) -> None:
    """It resumed from step 5 (an older checkpoint) while the last good one is step 10."""
    rerun = [r for r in rows if r["type"] == "job.step" and r["attempt"] == 2]
    for i, r in enumerate(rerun):
        r["attributes"]["step"] = 6 + i


def _claims_other(rows: list[dict[str, Any]]) -> None:
    """The steps continue at 11, but the restore line names step 5: they do not agree."""
    for r in rows:
        if r["type"] == "checkpoint.restored":
            r["attributes"]["step"] = 5


def _stalled(rows: list[dict[str, Any]]) -> None:
    """The rerun logs steps 11 and 12 and stops: never past the failure step (12)."""
    rows[:] = [r for r in rows if not (r["type"] == "job.step" and r["attempt"] == 2
                                       and r["attributes"]["step"] > 12)]


def _overlap(rows: list[dict[str, Any]]) -> None:
    """The old attempt still logs a step after the rerun started: two runs at once."""
    rows.append(_row("job.step", 41, 1, step=13))


SABOTAGES: list[tuple[str, str, Callable[[list[dict[str, Any]]], None] | None,
                      dict[str, Any]]] = [
    ("failure detected", "no failure event", None, {"symptom": None}),
    ("failure detected", "no incident", None, {"incident": None}),
    (TIMED, "jobtrail took 12 s", None, {"jobtrail_s": 12.0}),
    (TIMED, "never measured", None, {"jobtrail_s": None}),
    ("attempt stopped", "no end", _without({"job.requeued"}, 1), {}),
    ("job requeued or resubmitted", "no new attempt",
     _without({"job.started", "checkpoint.restored", "job.step"}, 2), {}),
    ("last checkpoint restored", "started over behind an intact name", _started_over, {}),
    ("last checkpoint restored", "fell back to an older checkpoint", _fell_back, {}),
    ("last checkpoint restored", "restore line and steps disagree", _claims_other, {}),
    ("last checkpoint restored", "the rerun logged no step", _without({"job.step"}, 2), {}),
    ("progress past the failure step", "stalled at the failure step", _stalled, {}),
    ("no duplicate run", "the old attempt ran on", _overlap, {}),
    ("no duplicate run", "the incident flagged it", None,
     {"incident": {"incident_id": "inc-1", "jobs": [{"duplicate_run": True}]}}),
    ("lost GPU time", "nothing charged, no GPUs", None, {"charged_gpu_hours": 0.0, "gpus": 0}),
]


@pytest.mark.parametrize(("check", "why", "sabotage", "over"), SABOTAGES,
                         ids=[f"{c}: {w}" for c, w, _, _ in SABOTAGES])
def test_each_check_fails_on_its_sabotage(check: str, why: str,
                                          sabotage: Callable[[list[dict[str, Any]]], None] | None,
                                          over: dict[str, Any]) -> None:
    rows = copy.deepcopy(_run())
    if sabotage is not None:
        sabotage(rows)
    verdict = _verdict(_facts(rows, **over))
    assert verdict[check].passed is False, (why, verdict[check])
    assert verdict[check].detail


def test_the_started_over_rerun_says_so() -> None:
    rows = copy.deepcopy(_run())
    _started_over(rows)
    v = judge(_facts(rows))
    [restored] = [c for c in v.checks if c.name == "last checkpoint restored"]
    assert "first step is 1" in restored.detail and "started over" in restored.detail
    assert "its restore line names step 10" in restored.detail  # the name alone is not enough
    assert [e["step"] for e in restored.evidence] == [10, 10, 1]  # saved, restore line, step
    assert v.restored_step == 0


def test_a_save_finished_just_after_the_injection_is_the_last_checkpoint() -> None:
    """The fault does not stop the process that instant: step 10's save logged 0.3 s after
    the injection is on disk, the rerun resumes at 11, and that is the last checkpoint."""
    rows = copy.deepcopy(_run())
    v = _verdict(_facts(rows, t0=_at(10).timestamp()))  # injected just before step 10's save
    assert v["last checkpoint restored"].passed, v["last checkpoint restored"]
    assert [e["step"] for e in v["last checkpoint restored"].evidence] == [10, 10, 11]


def _unrequeued(job: str = "7") -> list[dict[str, Any]]:
    rows = [r for r in _run(job) if r["attempt"] == 1 and r["type"] != "job.requeued"]
    rows.append(_row("job.failed", 13.2, 1, job, reason="NODE_FAIL"))
    return rows


def _resubmitted() -> list[dict[str, Any]]:
    rows = [r for r in _run("9") if r["attempt"] == 2]
    for r in rows:
        r["attempt"] = 1
    return rows


def test_a_job_that_was_not_requeued_fails_then_the_resubmission_is_judged() -> None:
    fb = Fallback("job 7 ended without a requeue", True, "job 7 has nothing left running",
                  True, "node n1 is idle (sinfo)", "9")
    v = _verdict(_facts(_unrequeued(), recovery=_resubmitted(), recovery_job="9", fallback=fb))
    assert v["job requeued or resubmitted"].passed is False
    assert "was not requeued" in v["job requeued or resubmitted"].detail
    assert "NODE_FAIL" in v["job requeued or resubmitted"].detail
    assert v["stop, clean up, resubmit"].passed
    for name in ("last checkpoint restored", "progress past the failure step",
                 "no duplicate run"):
        assert v[name].passed, v[name]
        assert all(e.get("job_id") in ("7", "9") for e in v[name].evidence)


@pytest.mark.parametrize("broken", ["not stopped", "not cleaned", "never started"])
def test_the_resubmit_path_fails_when_a_step_of_it_did(broken: str) -> None:
    fb = Fallback("job 7 ended without a requeue", broken != "not stopped", "-",
                  broken != "not cleaned", "-", "9")
    recovery = [] if broken == "never started" else _resubmitted()
    v = _verdict(_facts(_unrequeued(), recovery=recovery, recovery_job="9", fallback=fb))
    assert v["stop, clean up, resubmit"].passed is False
