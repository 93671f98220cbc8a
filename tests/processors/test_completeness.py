"""processors.completeness on facts built by hand: what is expected is measured (the ranks'
logging pattern, a node log's reach, a source's pulse), and each kind of gap is found."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from processors.completeness import Facts, Heard, assess, caveat, expected_ranks

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
END = T0 + timedelta(minutes=60)


def _heard(kind: str, key: str, first: float, last: float, n: int = 5) -> Heard:
    return Heard(kind, key, n, T0 + timedelta(minutes=first), T0 + timedelta(minutes=last),
                 f"ev-{kind}-{key}-{last}")


def test_the_ranks_expected_follow_the_logging_pattern() -> None:
    one_per_node = [f"rank-{n}" for n in range(0, 512, 8)]
    assert expected_ranks(one_per_node, 512) == one_per_node  # local rank 0 of each node
    assert expected_ranks(["rank-0"], 512) == ["rank-0"]  # only rank 0 logs
    assert expected_ranks(["rank-0", "rank-1", "rank-3"], 4) == [
        "rank-0", "rank-1", "rank-2", "rank-3"]
    placed = ["rank-0", "rank-1", "rank-2", "rank-3", "rank-4", "rank-5"]
    assert expected_ranks(["rank-0", "rank-2"], 0, placed) == ["rank-0", "rank-2", "rank-4"]
    assert expected_ranks([], 8) == []


def test_a_stopped_node_log_and_a_rank_that_never_logged_are_gaps() -> None:
    nodes = ["node-001", "node-002", "node-003", "node-004"]
    heard = [_heard("scheduler", "", 0, 60, 2)]
    heard += [_heard("node log", n, 0, 35 if n == "node-003" else 55) for n in nodes]
    heard += [_heard("rank log", f"rank-{r}", 1, 56) for r in (0, 1, 3)]
    facts = Facts(start=T0, end=END, nodes=nodes, gpus=4, heard=heard)
    found = assess(facts)
    assert [(g.kind, g.key, g.status) for g in found.gaps] == [
        ("rank log", "rank-2", "never"), ("node log", "node-003", "stopped")]
    assert "stopped 25 min before the attempt's end" in found.gaps[1].why
    assert "ev-node log-node-003-35" in found.gaps[1].why
    note = caveat(found)
    assert note.startswith("The cause rests on incomplete evidence: rank log of rank-2 never")
    # the same node quiet, with no peer speaking after it: the world went quiet, not it
    alone = [h for h in heard if h.kind != "node log"] + [_heard("node log", n, 0, 35)
                                                        for n in nodes]
    assert [g.key for g in assess(Facts(start=T0, end=END, nodes=nodes, gpus=4,
                                        heard=alone)).gaps] == ["rank-2"]


def test_a_log_that_speaks_from_few_nodes_is_sparse_not_a_gap() -> None:
    nodes = [f"node-{n:03d}" for n in range(1, 65)]
    heard = [_heard("scheduler", "", 0, 60, 2), _heard("node log", "node-041", 45, 46, 2)]
    found = assess(Facts(start=T0, end=END, nodes=nodes, gpus=512, heard=heard))
    assert found.gaps == [] and found.expected["node log"] == []
    assert [(s.key, s.status) for s in found.streams if s.kind == "node log"] == [
        ("node-041", "sparse")]


def test_a_source_with_a_pulse_that_stops_is_silent_cluster_wide() -> None:
    pulse = Heard("fabric", "", 40, T0 - timedelta(minutes=60), T0 + timedelta(minutes=30),
                  "ev-last", "network", frozenset({1, 2, 3, 4, 5}))
    bursty = Heard("storage", "", 3, T0 + timedelta(minutes=10), T0 + timedelta(minutes=12),
                   "ev-s", "storage", frozenset({2}))
    found = assess(Facts(start=T0, end=END, nodes=["node-001"], gpus=8,
                         heard=[_heard("scheduler", "", 0, 60, 2)], cluster=[pulse, bursty]))
    assert [(g.key, g.status) for g in found.gaps] == [("cluster:network", "silent")]
    assert "network went silent cluster-wide 30 min before" in found.gaps[0].why
    assert "ev-last" in found.gaps[0].why


def test_an_attempt_the_scheduler_never_reported_has_that_gap() -> None:
    found = assess(Facts(start=T0, end=END, nodes=["node-001"], gpus=8))
    assert [(g.kind, g.status) for g in found.gaps] == [("scheduler", "never")]
