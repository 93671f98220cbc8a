"""The incident aggregate: lifecycle, invalid transitions, idempotent commands, rules files."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path

import pytest

from processors.incidents.model import Actor, Command, InvalidTransition, fold
from processors.incidents.rules import DEFAULT_RULES, RulesError, load_rules
from tests.processors.incident_kit import at, ev, incidents, nodes, run, started

ALICE = Actor(kind="person", name="alice")


def _opened() -> tuple[list, object]:  # type: ignore[type-arg]
    log, p = run([started("j", 1, at(0), nodes(1, 2)),
                  ev("node.xid", at(5), scope="gpu", entity="node-001/gpu0", node="node-001",
                     attributes={"xid": 79})])
    return log, p


def _cmd(inc: str, command: str, n: int, **data: object) -> Command:
    return Command(command_id=f"c{n}", incident_id=inc, command=command,  # type: ignore[arg-type]
                   actor=ALICE, time=at(10 + n), data=data)


def test_lifecycle_is_audited_and_invalid_transitions_say_why() -> None:
    log, p = _opened()
    (inc,) = incidents(log)
    d = p.detector
    with pytest.raises(InvalidTransition, match="cannot go to closed from open"):
        d.command(_cmd(inc.id, "close", 1))
    for n, name in enumerate(["ack", "mitigate", "resolve"], start=2):
        (event,) = d.command(_cmd(inc.id, name, n))
        log.append(event)
        assert event.actor == ALICE and event.command_id == f"c{n}"
    assert d.incidents[inc.id].status == "resolved"
    with pytest.raises(InvalidTransition, match="cannot go to acknowledged from resolved"):
        d.command(_cmd(inc.id, "ack", 9))
    log += d.command(_cmd(inc.id, "add_action", 10, title="replace node-001 GPU0",
                          owner="hardware-ops"))
    # the processors' proposals are not triaged yet: the checklist holds the close
    with pytest.raises(InvalidTransition, match="checklist is open: followups_owned"):
        d.command(_cmd(inc.id, "close", 11))
    with pytest.raises(InvalidTransition, match="give a reason"):
        d.command(_cmd(inc.id, "close", 11, force=True))
    added = next(a for a in d.incidents[inc.id].actions.values()
                 if a.title == "replace node-001 GPU0")
    severity = d.incidents[inc.id].severity
    days = {"sev1": 14, "sev2": 30, "sev3": 60, "sev4": 90}[severity]
    assert added.due == (at(20) + timedelta(days=days)).date().isoformat()  # from severity
    proposed = sorted(a.action_id for a in d.incidents[inc.id].actions.values()
                      if a.status == "proposed")
    assert proposed
    for n, action_id in enumerate(proposed, start=30):
        log += d.command(_cmd(inc.id, "dismiss_action", n, action_id=action_id,
                              reason="covered by the GPU replacement"))
    # an owned, dated follow-up may stay open past the close (it is tracked per team)
    log += d.command(_cmd(inc.id, "close", 13))
    state = d.incidents[inc.id]
    assert state.status == "closed" and state.closed_at == at(23)
    with pytest.raises(InvalidTransition, match="is closed"):
        d.command(_cmd(inc.id, "reopen", 14))
    # the log is the state: folding it again gives the same incident
    assert fold(log)[inc.id] == state
    assert [e.seq for e in log if e.incident_id == inc.id] == list(range(1, state.seq + 1))


def test_a_command_applied_twice_changes_nothing() -> None:
    log, p = _opened()
    (inc,) = incidents(log)
    first = p.detector.command(_cmd(inc.id, "ack", 1))
    assert len(first) == 1
    assert p.detector.command(_cmd(inc.id, "ack", 1)) == []  # same command id: no-op


def test_a_manual_assignment_is_an_event_and_the_processor_keeps_it() -> None:
    log, p = _opened()
    (inc,) = incidents(log)
    assert inc.owner == "hardware-ops" and inc.owner_rule == "gpu_hardware"
    (event,) = p.detector.command(_cmd(inc.id, "assign", 1, team="network",
                                       why="the GPU fell off after a cable swap"))
    assert event.kind == "owner_assigned" and event.data["rule"] == "manual"
    # a later signal on the same node does not route it back
    out = p.process([ev("node.xid", at(20), scope="gpu", entity="node-001/gpu0",
                        node="node-001", attributes={"xid": 79})])
    assert "owner_assigned" not in [e.kind for e in out.incidents]
    state = p.detector.incidents[inc.id]
    assert (state.owner, state.owner_why) == ("network", "the GPU fell off after a cable swap")


def test_a_signal_after_resolution_reopens_the_incident() -> None:
    log, p = _opened()
    (inc,) = incidents(log)
    p.detector.command(_cmd(inc.id, "resolve", 1))
    out = p.process([ev("node.xid", at(30), scope="gpu", entity="node-001/gpu0",
                        node="node-001", attributes={"xid": 79})])
    assert [e.kind for e in out.incidents][:1] == ["reopened"]
    assert p.detector.incidents[inc.id].status == "open"


def test_the_default_rules_file_is_valid_and_errors_name_the_field(tmp_path: Path) -> None:
    rules = load_rules(DEFAULT_RULES)
    assert {r.name for r in rules.signals} >= {"gpu-xid-fatal", "ib-port-flap"}
    bad = tmp_path / "rules.yaml"
    bad.write_text("signals:\n  - {name: x, types: [node.xidd], class: gpu_hardware}\n")
    with pytest.raises(RulesError, match=r"signals\.0\.types: Value error, unknown event type"):
        load_rules(bad)
    bad.write_text("cause_window_s: -1\n")
    with pytest.raises(RulesError, match="cause_window_s"):
        load_rules(bad)
    bad.write_text("routing: {rules: [{name: r, team: t, entity: '('}]}\n")
    with pytest.raises(RulesError, match=r"routing\.rules\.0\.entity"):
        load_rules(bad)
    bad.write_text("signal: []\n")  # a typo is an error, not a silently ignored key
    with pytest.raises(RulesError, match="signal: Extra inputs are not permitted"):
        load_rules(bad)


def test_proposed_follow_ups_are_accepted_edited_or_dismissed_in_the_log() -> None:
    log, p = _opened()  # Xid 79 on node-001/gpu0
    (inc,) = incidents(log)
    d = p.detector
    proposals = {a.rule: a for a in d.incidents[inc.id].actions.values()}
    assert proposals["gpu-off-the-bus"].status == "proposed"
    assert "GPU 0" in proposals["gpu-off-the-bus"].title
    assert proposals["gpu-off-the-bus"].owner == "hardware-ops"
    off, = [a.action_id for a in proposals.values() if a.rule == "gpu-off-the-bus"]
    log += d.command(_cmd(inc.id, "accept_action", 1, action_id=off))
    log += d.command(_cmd(inc.id, "update_action", 2, action_id=off, owner="dc-ops"))
    with pytest.raises(InvalidTransition, match="dismissed needs a reason"):
        d.command(_cmd(inc.id, "dismiss_action", 3, action_id=off))
    log += d.command(_cmd(inc.id, "dismiss_action", 4, action_id=off, reason="GPU replaced"))
    state = d.incidents[inc.id]
    assert (state.actions[off].status, state.actions[off].owner,
            state.actions[off].reason) == ("dismissed", "dc-ops", "GPU replaced")
    assert fold(log)[inc.id].actions == state.actions


def test_a_sustained_condition_is_counted_past_the_cap_not_logged_signal_by_signal() -> None:
    """A GPU ticking correctable errors for a day: the first `max_signal_evidence` signals
    are attached one by one, the rest counted in one signal_added per quarter group window;
    the incident stays open, its count stays exact up to what is still being folded."""
    sbe = [ev("node.ecc", at(0, 20 * i), scope="gpu", entity="node-003/gpu1", node="node-003",
              attributes={"gpu": "1", "kind": "sbe", "count": 1}) for i in range(3 * 24 * 60)]
    log, p = run(sbe, batch=500)
    (inc,) = incidents(log)
    cap, quarter = p.detector.rules.max_signal_evidence, p.detector.rules.group_window_s / 4
    assert inc.status == "open" and len(inc.evidence) == cap
    folded = p.detector.book.folded.get(inc.id, 0)
    assert inc.signals + folded == len(sbe)
    beats = [e for e in log if e.kind == "signal_added" and e.data.get("count", 1) > 1]
    assert beats and all(b.time - a.time >= timedelta(seconds=quarter)
                         for a, b in itertools.pairwise(beats))
    # bounded: one entry per quarter window past the cap, not two per signal
    assert len(log) < 3 * cap + len(sbe) * 20 / quarter + 20
    # and so is the state: the counts' ids are not kept (a standing incident's memory, and
    # each lateness checkpoint's copy of it, would grow by one per quarter window for as
    # long as the condition lasts)
    live = p.detector.book.incidents[inc.id]
    assert len(beats) > 150 and len(live.applied) < 3 * cap + 20
    # each count still folds once: the log delivered twice (at least once) gives the same
    twice = fold([e for e in log for _ in range(2)])[inc.id]
    assert (twice.signals, twice.seq, twice.last_signal_at, len(twice.evidence)) == \
        (inc.signals, inc.seq, inc.last_signal_at, cap)
    assert (live.signals, live.applied) == (inc.signals, inc.applied)


def test_a_stored_v1_loss_is_recomputed_without_the_recompute_on_every_fold() -> None:
    """Issue 27: v1 `impact_assessed` counted the re-done steps a second time; folding the
    stored log (replay, restore, drafts) takes them out, exactly, without rewriting it."""
    from processors.incidents.model import IncidentEvent

    processor = Actor(kind="processor", name="detector", rule="impact")
    job = {"project": "p", "job_id": "j", "attempt": 1}
    v1 = {"job": job, "lost_gpu_hours": 426.666667, "lost_steps": 200, "rework_s": 1260.0,
          "downtime_s": 540.0, "restore_s": 300.0, "recompute_s": 900.0,
          "charged_elsewhere_gpu_hours": 0.0}
    log = [IncidentEvent(id="e1", incident_id="inc-x", seq=1, kind="job_impacted", time=at(0),
                         actor=processor, data={"job": job, "gpus": 512}),
           IncidentEvent(id="e2", incident_id="inc-x", seq=2, kind="impact_assessed",
                         time=at(60), actor=processor, data=v1)]
    (inc,) = fold(log).values()
    assert inc.lost_gpu_hours == 298.666667  # 512 x (1260 + 540 + 300) s / 3600
    assert inc.jobs["p/j/1"].rework_s == 1260.0 and inc.jobs["p/j/1"].queue_s == 0.0


def test_evidence_a_revision_takes_out_is_not_shown_from_the_store() -> None:
    """Late evidence revises an incident and its conclusion no longer stands on an event it
    had attached (written to the store a batch before): the store's row for that event is
    overwritten as `moved`, so the incident's evidence listed from the store is what the
    incident stands on; the event attached again gives its row back."""
    from processors.incidents.model import IncidentEvent
    from tests.processors.incident_kit import replayed, stored

    processor = Actor(kind="processor", name="detector", rule="lateness")

    def attach(n: int, seq: int, event_id: str) -> IncidentEvent:
        return IncidentEvent(id=f"e{n}", incident_id="inc-x", seq=seq,
                             kind="evidence_attached", time=at(n), actor=processor,
                             data={"event_id": event_id, "time": at(n), "role": "symptom",
                                   "type": "job.worker_exited"})

    opened = IncidentEvent(id="e0", incident_id="inc-x", seq=1, kind="opened", time=at(0),
                           actor=processor, data={"key": "job:p/j/1", "class": "code_error"})
    kept, gone = attach(1, 2, "ev-kept"), attach(2, 3, "ev-gone")
    first = [opened, kept, gone]
    state = fold(first)["inc-x"]
    revised = IncidentEvent(
        id="e3", incident_id="inc-x", seq=4, kind="diagnosis_revised", time=at(3),
        actor=processor, data={"why": "late", "key": "node:n1", "class": "node_failure",
                               "evidence": [{"event_id": "ev-kept", "time": at(1),
                                             "type": "job.worker_exited", "source": "job",
                                             "entity": "", "why": "exit",
                                             "role": "symptom"}]})
    after = fold([*first, revised])["inc-x"]
    batches = [([state], first), ([after], [revised])]
    for rows in (stored(batches), replayed([*first, revised])):
        shown = {k[1]: r["role"] for k, r in rows["incident_evidence"].items()}
        assert shown == {"ev-kept": "symptom", "ev-gone": "moved"}
    back = attach(4, 5, "ev-gone")
    again = fold([*first, revised, back])["inc-x"]
    rows = stored([*batches, ([again], [back])])
    assert {k[1]: r["role"] for k, r in rows["incident_evidence"].items()} == \
        {"ev-kept": "symptom", "ev-gone": "symptom"} and not again.dropped


@pytest.mark.parametrize(("reason", "planned"), [
    ("CHG-2041 firmware update", True), ("maintenance: PSU swap", True), ("Reboot ASAP", True),
    ("Node unexpectedly rebooted boot_time=1764489600", False), ("NHC: Xid 79", False),
    ("IB link state change", False), ("Kill task failed", False), ("not responding", False)])
def test_a_drain_is_planned_work_only_when_its_reason_says_so(reason: str,
                                                              planned: bool) -> None:
    """Issue 27, item 7: maintenance and tickets are planned; faults never are."""
    from processors.incidents import planned as planned_work
    from processors.incidents.book import Book
    from processors.incidents.context import Context
    from processors.topology import Topology

    ctx = Context(Book(), load_rules(DEFAULT_RULES), Topology)
    drained = ev("node.drained", at(0), scope="node", entity="node-001", node="node-001",
                 attributes={"reason": reason})
    assert planned_work.maintenance(ctx, drained) is planned
