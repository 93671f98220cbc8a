"""A recovery drill's incident (jobtrail drill run, docs/drills.md): the same detection as a
real failure, flagged `drill` in its log the moment a drill-tagged event joins it, so it pages
nobody; a real failure on the same events without the tag pages as usual."""

from __future__ import annotations

from processors.notify.changes import changes
from schemas.events import Event
from tests.processors.incident_kit import at, ev, incidents, nodes, run, started, step


def _events(tag: dict[str, str]) -> list[Event]:
    job, on = "77", nodes(1, 1)
    return [started(job, 1, at(0), on, **tag), step(job, 1, at(1), 10),
            ev("job.requeued", at(2), job=job, attempt=1,
               attributes={"reason": "NODE_FAIL", "failed_nodes": on, **tag}),
            started(job, 2, at(3), on, **tag)]


def test_a_drill_incident_is_flagged_and_pages_nobody() -> None:
    log, _ = run(_events({"drill": "drill-node-down-1"}))
    (inc,) = incidents(log)
    assert "drill" in inc.flags and inc.jobs  # a requeue on node failure is a job symptom
    assert any(e.kind == "signal_added" and e.data.get("flag") == "drill" for e in log)
    assert changes([e for e in log if e.incident_id == inc.id]) == []


def test_the_same_failure_without_the_tag_pages() -> None:
    log, _ = run(_events({}))
    (inc,) = incidents(log)
    assert "drill" not in inc.flags
    assert [c.transition for c in changes([e for e in log if e.incident_id == inc.id])][:1] \
        == ["opened"]
