"""Within the lateness horizon the incidents are a function of the events' times: whatever
order the sources deliver in (files imported one after another, lags, a late backfill), the
conclusions are those of the events in time order, and late evidence revises an incident
rather than opening a second one."""

from __future__ import annotations

import zlib
from datetime import timedelta

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bench import stories
from processors.incidents.model import Actor, Command, fold
from processors.pipeline import Pipeline
from tests.scenarios.library import LIBRARY, check, load, run, wiring

SEEDS = range(40)
PHASES = (Phase.explicit, Phase.reuse, Phase.generate)  # a story is its own small example


@st.composite
def delivery(draw: st.DrawFn) -> tuple[stories.Story, list[str]]:
    """A story and an arrival order: its sources in any order, each delayed by up to 2 h
    and its events reordered within a few minutes."""
    story = stories.of_class(draw(st.sampled_from(SEEDS)),
                             draw(st.sampled_from(stories.CLASSES)))
    sources = sorted({s for s, _ in story.events})
    delay = {s: draw(st.integers(0, 7200)) for s in sources}
    jitter = draw(st.integers(0, 300))
    arrival = []
    for i, (source, event) in enumerate(story.events):
        wobble = zlib.crc32(event.id.encode()) % (jitter + 1)
        arrival.append((event.time + timedelta(seconds=delay[source] + wobble), i))
    return story, [story.events[i][1].id for _, i in sorted(arrival)]


@settings(max_examples=25, deadline=None, derandomize=True, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow])
@given(delivery())
def test_any_delivery_order_gives_the_time_order_answer(case: tuple[stories.Story,
                                                                   list[str]]) -> None:
    story, order = case
    by_id = {e.id: e for _, e in story.events}
    in_time = stories.answer(stories.run([e for _, e in story.events]))
    log = stories.run([by_id[i] for i in order])
    # the same incidents (no second one for a failure), each with the same conclusion
    assert stories.answer(log) == in_time
    assert all(i.status == "closed" for i in fold(log).values() if i.withdrawn)


def test_files_imported_source_by_source_give_one_revised_incident() -> None:
    scenario = load(LIBRARY / "files-imported-source-by-source.yaml")
    log, pipeline = run(scenario)
    assert not check(scenario, log)
    assert pipeline.reorder.reevaluations > 0
    revised = [e for e in log if e.kind == "diagnosis_revised"]
    assert revised and revised[-1].data["class"] == "gpu_hardware"
    in_order = sorted(scenario.events, key=lambda e: (e.time, e.id))
    scenario.events[:] = in_order
    log_in_order, again = run(scenario)
    assert not check(scenario, log_in_order) and again.reorder.reevaluations == 0


def test_an_event_older_than_the_horizon_is_decided_where_it_arrived() -> None:
    story = stories.of_class(3, "gpu_hardware")
    events = [e for _, e in story.events]
    xid = next(e for e in events if e.type == "node.xid" and e.node in
               {n for _, ev in story.events for n in ev.attributes.get("nodes", [])})
    late = [e for e in events if e is not xid] + [xid]
    log = stories.run(late, horizon=timedelta(minutes=10))
    assert stories.answer(log)  # concluded, no crash; arrival order decides past the horizon


def test_a_revision_keeps_what_people_did() -> None:
    scenario = load(LIBRARY / "late-cause.yaml")
    started, symptom, port_down = scenario.events
    pipeline = Pipeline(timedelta(seconds=30), wiring(scenario), rules=scenario.rules)
    log = pipeline.process([started, symptom]).incidents
    (inc_id,) = {e.incident_id for e in log}
    person = Actor(kind="person", name="ana")
    for n, (name, data) in enumerate([("ack", {}), ("assign", {"team": "sre"})]):
        log += pipeline.command(Command(command_id=f"c{n}", incident_id=inc_id, command=name,
                                        actor=person, time=symptom.time, data=data)).incidents
    log += pipeline.process([port_down]).incidents
    inc = fold(log)[inc_id]
    assert [e.kind for e in log][-1] == "diagnosis_revised"
    assert (inc.klass, inc.entity) == ("network", "leaf-01/p9")
    assert (inc.status, inc.owner, inc.owner_rule) == ("acknowledged", "sre", "manual")
