"""A job resubmitted under a new job id that restores an earlier job's checkpoint continues
it (processors/incidents/continuation.py): the links the book keeps, project isolation, a
job restoring its own checkpoint as before, and the links rebuilt from the log."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from jobtrail.learn.scenarios import Scenario, check, load, run
from processors.incidents import continuation
from processors.incidents.book import Book
from processors.incidents.model import fold
from schemas.events import Event, Source

LIBRARY = Path(__file__).parents[1] / "scenarios" / "incidents"
RESUBMITTED = LIBRARY / "resubmitted-under-a-new-job-id-restores-the-checkpoint.yaml"
OWN = LIBRARY / "failed-without-requeue-holds-nothing-until-resubmitted.yaml"
OLD = ("llm-pretrain", "50100")
NEW = ("llm-pretrain", "50107")


@pytest.mark.parametrize(("path", "root"), [
    ("/ckpt/run/global_step1000", "/ckpt/run"),
    ("/ckpt/run/global_step1000/mp_rank_00_model_states.pt", "/ckpt/run"),
    ("/ckpt/run/", "/ckpt/run"),
    ("./outputs/checkpoint-500", "./outputs"),
    ("/ckpt/run/iter_0000500", "/ckpt/run"),
    ("/ckpt/step-runs/model.pt", "/ckpt/step-runs/model.pt"),
])
def test_a_checkpoint_is_named_by_its_root(path: str, root: str) -> None:
    assert continuation.root(path) == root


def _book(scenario: Scenario) -> Book:
    _, pipeline = run(scenario)
    book: Book = pipeline.detector.book
    return book


def test_the_resubmission_continues_the_job_whose_checkpoint_it_restored() -> None:
    """The book links 50107 to 50100 (the root 50100 saved), and nothing of the other
    project's job that loaded a directory of the same name."""
    book = _book(load(RESUBMITTED))
    assert book.continued == {NEW: OLD}
    assert book.saved_paths == {("llm-pretrain", "/ckpt/llm-pretrain/run-50100"): ("50100", 1)}


def test_a_path_of_the_same_name_in_another_project_is_never_linked() -> None:
    """Without the owner's resubmission, only the other project's job restores the path and
    passes the failure step: the failed attempt still waits for its restart, nothing lost."""
    scenario = load(RESUBMITTED)
    alone = replace(scenario, events=[e for e in scenario.events if e.job_id != "50107"])
    log, pipeline = run(alone)
    assert pipeline.detector.book.continued == {}
    [inc] = [i for i in fold(log).values() if not i.withdrawn]
    job = inc.jobs["llm-pretrain/50100/1"]
    assert (job.recovery, job.restarted_job, job.restarted_attempt, job.lost_gpu_hours) == (
        "awaiting_restart", None, None, 0.0)
    assert inc.recovery == "awaiting_restart"


def test_a_job_restoring_its_own_checkpoint_behaves_as_before() -> None:
    """The same job's next attempt restoring the path its failed attempt saved: no link,
    and the incident log is the one the restore without a path gives (the scenario's own
    figures: 0.533333 GPU-hours, verified)."""
    scenario = load(OWN)
    named = replace(scenario, events=[
        e.model_copy(update={"attributes": {**e.attributes, "path": "./outputs/checkpoint-500"}})
        if e.type == "checkpoint.restored" else e for e in scenario.events])
    log, _ = run(scenario)
    named_log, named_pipeline = run(named)
    assert named_pipeline.detector.book.continued == {}
    assert not check(named, named_log)

    assert [e.model_dump(mode="json") for e in named_log] == \
        [e.model_dump(mode="json") for e in log]
    [inc] = [i for i in fold(named_log).values() if not i.withdrawn]
    job = inc.jobs["finetune/ft-13b/1"]
    assert (job.restarted_job, job.restarted_attempt, job.lost_gpu_hours, job.recovery) == (
        None, 2, 0.533333, "verified")


def test_the_links_are_rebuilt_from_the_log() -> None:
    """A worker restoring its book from the incident log (no snapshot) knows 50107
    continues 50100 from the `restarted_job` the log holds."""
    log, _ = run(load(RESUBMITTED))
    book = Book()
    book.restore(log, {}, lambda entity: "", lambda klass: False)
    assert book.continued == {NEW: OLD}


def test_forgotten_jobs_take_their_links_with_them() -> None:
    scenario = load(RESUBMITTED)
    _, pipeline = run(scenario)
    book = pipeline.detector.book
    pipeline.detector.forget_jobs(scenario.at("24h"))
    assert book.continued == {} and book.saved_paths == {}


def test_a_restore_never_links_a_job_to_itself_or_in_a_cycle() -> None:
    book = Book()
    book.saved_paths[("p", "/ckpt/a")] = ("1", 1)
    book.continued[("p", "1")] = ("p", "2")  # 1 continues 2 already
    event = load(RESUBMITTED).events[0].model_copy(update={
        "project": "p", "job_id": "2", "type": "checkpoint.restored",
        "attributes": {"step": 5, "path": "/ckpt/a"}})
    assert continuation.link(book, event, ("p", "2", 1)) is None
    assert continuation.link(book, event.model_copy(update={"job_id": "1"}), ("p", "1", 1)) \
        is None
    assert book.continued == {("p", "1"): ("p", "2")}


def test_a_relative_checkpoint_path_links_no_two_jobs() -> None:
    """`./outputs` is each job's own directory: the resubmission's story with both jobs
    writing and loading a relative path links nothing, while `s3://` and absolute paths
    do."""
    scenario = load(RESUBMITTED)

    def relative(e: Event) -> Event:
        path = e.attributes.get("path")
        if not isinstance(path, str):
            return e
        return e.model_copy(update={"attributes": {**e.attributes,
                                                   "path": "./" + path.lstrip("/")}})

    book = _book(replace(scenario, events=[relative(e) for e in scenario.events]))
    assert book.continued == {} and book.saved_paths == {}
    for path, linked in (("s3://bucket/run/global_step5", "s3://bucket/run"),
                         ("./run/global_step5", ""), ("run", "")):
        event = Event(id="x", type="checkpoint.saved", source=Source.job,
                      time="2026-12-07T00:00:00Z", project="p", cluster="c", job_id="j",
                      attempt=1, attributes={"step": 5, "path": path})
        assert continuation.path_of(event) == linked, path
