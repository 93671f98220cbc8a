"""Changes governed: a change that regresses and one that does not, with the exact p-values
(hand computations in the comments), and the evidence read back from the store."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from math import comb

import pytest

from jobtrail.reports import changes as ch
from jobtrail.store import Store


def test_a_driver_change_that_regresses() -> None:
    before = ch.Side(10, Counter(), (1.0,) * 10)
    after = ch.Side(10, Counter({"Xid 79": 4, "NCCL timeout": 2}), (1.0,) * 10)
    v = ch.judge(before, after)
    # all 6 failures after it: C(10,6) C(10,0) / C(20,6) = 210 / 38760
    assert v.verdict == "regressed"
    assert v.confidence == pytest.approx(1 - 210 / 38760)  # 0.994582
    assert "failures 0/10 -> 6/10 (p=0.0054)" in v.why


def test_an_image_change_that_does_not() -> None:
    v = ch.judge(ch.Side(10, Counter({"OOM": 1}), (1.0,) * 10),
                 ch.Side(10, Counter({"OOM": 1}), (1.0,) * 10))
    # P(at least 1 of the 2 failures after) = 1 - C(10,2) / C(20,2) = 1 - 45/190
    assert v.verdict == "no regression"
    assert v.confidence == pytest.approx(45 / 190)  # 0.236842


def test_a_change_that_only_slows_steps_regresses() -> None:
    before = ch.Side(10, Counter(), tuple(1.0 + i / 100 for i in range(10)))
    after = ch.Side(10, Counter(), tuple(1.2 + i / 100 for i in range(10)))
    v = ch.judge(before, after)
    # every step after is slower: U = 100, z = 50 / sqrt(10*10*21/12) = 3.7796
    assert v.verdict == "regressed"
    assert 1 - v.confidence == pytest.approx(7.85e-5, rel=1e-2)
    assert ch.judge(ch.Side(2), ch.Side(10)).verdict == "insufficient evidence"


T = datetime(2026, 11, 20, 12, tzinfo=UTC)


def test_the_evidence_comes_from_the_store(store: Store) -> None:
    store.client.insert(f"{store.database}.events",
                        [["chg-1", T, "change.applied", "change", "node-007", "node-007",
                          '{"kind": "driver", "after": "550.90", "canary": true}']],
                        column_names=["id", "time", "type", "source", "entity", "node",
                                      "attributes"])
    rows = []
    for i in range(10):  # five attempts on node-007 before the change, none failed; five
        after = i >= 5   # after it, four failed with an Xid 79
        rows.append(["p", f"j{i}", 1, T + timedelta(hours=(i - 5) * 2 + 1),
                     "failed" if after and i < 9 else "completed",
                     "Xid 79" if after and i < 9 else "", ["node-007"], 1])
    store.client.insert(f"{store.database}.job_attempts", rows, column_names=[
        "project", "job_id", "attempt", "started_at", "outcome", "end_reason", "nodes",
        "version"])
    store.client.insert(f"{store.database}.job_timeline",
                        [["p", "j6", 1, T, "chg-1", "change.applied", "change"],
                         ["q", "other", 1, T, "chg-1", "change.applied", "change"]],
                        column_names=["project", "job_id", "attempt", "time", "event_id",
                                      "type", "relation"])
    [r] = ch.load(store, ["p"], T - timedelta(days=1), T + timedelta(days=1))
    assert (r.kind, r.nodes, r.jobs, r.canary) == ("driver", ("node-007",),
                                                  (("p", "j6", 1),), True)
    assert (r.before.attempts, r.before.failed, r.after.attempts, r.after.failed) == \
        (5, 0, 5, 4)
    assert r.after.failures == Counter({"Xid 79": 4})
    # C(5,4) C(5,0) / C(10,4) = 5 / 210
    assert r.verdict.verdict == "regressed"
    assert r.verdict.confidence == pytest.approx(1 - 5 / 210)
    assert comb(10, 4) == 210
    text = ch.markdown([r], title="Changes")
    assert "| 2026-11-20 12:00 | driver | node-007 | yes |  | 1 | 0% -> 80% | 0 -> 0 | " \
           "regressed | 0.976 |" in text


def test_an_incident_cites_the_changes_on_its_entities(store: Store) -> None:
    store.client.insert(f"{store.database}.events", [
        ["chg-1", T - timedelta(days=2), "change.applied", "node-007", "node-007",
         '{"kind": "driver"}'],
        ["chg-old", T - timedelta(days=9), "change.applied", "node-007", "node-007",
         '{"kind": "firmware"}'],
        ["chg-elsewhere", T - timedelta(days=1), "change.applied", "node-008", "node-008",
         '{"kind": "driver"}']],
        column_names=["id", "time", "type", "entity", "node", "attributes"])
    store.client.insert(f"{store.database}.incidents",
                        [["inc-1", 1, T, "node-007/gpu2", "node-007/gpu2", ["p"]]],
                        column_names=["incident_id", "version", "opened_at", "entity",
                                      "cause_entity", "projects"])
    cited = ch.cited_by_incident(store, ["p"], "inc-1")
    assert [(c["id"], c["kind"]) for c in cited] == [("chg-1", "driver")]
    assert ch.cited_by_incident(store, ["q"], "inc-1") == []
