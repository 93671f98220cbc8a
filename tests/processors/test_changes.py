"""Changes applied before the attempt (issue 41, items 4 and 9), on the pure functions: one key
per change, what it says it did, whom it names, and what it may explain."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from processors.incidents import changes, weighing
from processors.incidents.book import Signal
from processors.incidents.rules import SymptomRule, load_rules
from schemas.events import Event, Source

T = datetime(2026, 11, 30, 7, 0, tzinfo=UTC)


def _change(**attrs: object) -> Event:
    return Event(id="c1", type="change.applied", source=Source.change, time=T, cluster="c",
                 entity="rollout", attributes={"kind": "nccl", **attrs})


@pytest.mark.parametrize(("attrs", "key", "said"), [
    ({"ticket": "CHG-3107", "before": "2.18.3", "after": "2.19.3"}, "change:CHG-3107",
     "nccl 2.18.3 -> 2.19.3"),
    ({"after": "2.19.3"}, "change:nccl 2.19.3", "nccl 2.19.3"),
    ({}, "change:c1", "nccl"),
])
def test_one_key_per_change(attrs: dict[str, object], key: str, said: str) -> None:
    event = _change(**attrs)
    assert (changes.key_of(event), changes.what(event)) == (key, said)


def test_the_change_names_its_owner() -> None:
    assert changes.owner(_change(owner=" gpu-platform ")) == "gpu-platform"
    assert changes.owner(_change(team="images")) == "images"
    assert changes.owner(_change()) == ""


@pytest.mark.parametrize(("symptom", "rank", "wins"), [
    ("nccl_hang", 30, False), ("hang", 25, False), ("code_error", 70, False),
    ("oom", 90, True), ("gpu_hardware", 85, True), ("dataloader", 80, True)])
def test_a_change_never_explains_a_symptom_that_names_another_class(
        symptom: str, rank: int, wins: bool) -> None:
    """An NCCL hang or a crash after an NCCL or image rollout is the change's; an OOM or an
    ECC error is not, however many jobs the change reached."""
    rules = load_rules()
    rule = SymptomRule.model_validate({"name": "s", "types": ["job.failed"], "class": symptom,
                                       "rank": rank})
    event = _change(ticket="CHG-1")
    from processors.incidents.rules import SignalRule
    crule = SignalRule.model_validate({"name": changes.RULE, "types": ["change.applied"],
                                       "class": changes.KLASS, "weight": 2})
    best = weighing.Candidate(Signal(event, crule, "change:CHG-1", {}), "change", "x", 4, ())
    assert weighing.own_wins(best, rule, rules.change_explains) is wins


def test_planned_work_and_a_change_before_the_attempt_are_told_apart() -> None:
    """The same change: planned work for an attempt it was applied under, a candidate cause
    of its own class for an attempt that started after it."""
    from processors.incidents import planned
    from processors.incidents.rules import SignalRule

    event = _change(ticket="CHG-1")
    planned_rule = SignalRule.model_validate({"name": "planned-work",
                                              "types": ["change.applied"],
                                              "class": planned.KLASS})
    standing = SignalRule.model_validate({"name": changes.RULE, "types": ["change.applied"],
                                          "class": changes.KLASS})
    before, after = datetime(2026, 11, 30, 6, tzinfo=UTC), datetime(2026, 11, 30, 8, tzinfo=UTC)
    assert changes.applies(Signal(event, planned_rule, "p", {}), before)
    assert not changes.applies(Signal(event, planned_rule, "p", {}), after)
    assert changes.applies(Signal(event, standing, "s", {}), after)
    assert not changes.applies(Signal(event, standing, "s", {}), before)
