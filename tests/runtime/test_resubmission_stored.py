"""A job resubmitted under new job ids, run through the embedded runtime into the engine:
the store's `incident_jobs` names the job that restarted each failure, as the incident
does (tests/scenarios/incidents/resubmitted-twice-under-new-job-ids.yaml), and the
postmortem says the job was resubmitted, not restarted as its own next attempt."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from jobtrail.config import Settings
from jobtrail.learn.scenarios import wiring
from jobtrail.store import Store
from processors.incidents.model import fold
from processors.postmortem.story import restarted_as
from tests.scenarios.library import library, load


def test_the_store_names_the_job_that_restarted_each_failure(store: Store, tmp_path: Path) -> None:
    from jobtrail.runtime.embedded import EmbeddedRuntime

    path = next(p for p in library() if p.stem == "resubmitted-twice-under-new-job-ids")
    scenario = load(path)
    runtime = EmbeddedRuntime(Settings(home=tmp_path), topology=wiring(scenario), store=store)
    runtime.submit(scenario.events)
    runtime.drain()
    runtime.close()
    rows = store._dicts("SELECT job_id, attempt, restarted_job, restarted_attempt "
                        "FROM incident_jobs FINAL WHERE role = 'failed' ORDER BY job_id")
    assert [(r["job_id"], r["restarted_job"], r["restarted_attempt"]) for r in rows] == [
        ("50100", "50107", 1), ("50107", "50114", 1)]


def test_a_resubmission_is_told_as_one() -> None:
    from tests.scenarios.library import run

    scenario = load(next(p for p in library()
                         if p.stem == "resubmitted-under-a-new-job-id-restores-the-checkpoint"))
    log, _ = run(scenario, batch=1)
    (job,) = [j for i in fold(log).values() for j in i.jobs.values() if j.role == "failed"]
    assert job.restarted_job and job.restarted_job != job.job_id
    assert restarted_as(job) == (f"resubmitted as `{job.project}/{job.restarted_job}` "
                                 f"attempt {job.restarted_attempt}")
    same = replace(job, restarted_job=job.job_id)
    assert restarted_as(same) == f"restarted as attempt {job.restarted_attempt}"
