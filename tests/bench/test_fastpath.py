"""`bench.fastpath` at a small size: the fleet mix it replays is its seed, a GPU falling off
the bus fails the job running on that node (its ranks time out, it is requeued), and the
bench prints both paths' figures and that they wrote the same incident log."""

from __future__ import annotations

import pytest

from bench import fastpath, fleet


class Failing(fleet.FleetLoad):
    XID_PER_NODE_H = 0.05
    """A fatal Xid a node every 20 h: a few in a test's hours of 64 nodes."""


def test_the_fleet_mix_is_its_seed_and_an_xid_fails_the_job_on_its_node() -> None:
    records = Failing(64, seed=7).records(6000)
    assert records == Failing(64, seed=7).records(6000)
    assert [r["time"] for r in records] == sorted(r["time"] for r in records)
    xids = [r for r in records if r["type"] == "node.xid"]
    failed = [r for r in records if r["type"] == "job.failed"]
    assert len(xids) >= 3 and failed
    started = {(r["job_id"], r["attempt"]): r["attributes"]["nodes"]
               for r in records if r["type"] == "job.started"}
    for end in failed:  # the failed attempt ran on a node that lost a GPU 35 s before
        nodes = started.get((end["job_id"], end["attempt"]))
        if nodes is not None:
            assert any(x["node"] in nodes and x["time"] < end["time"] for x in xids), end


def test_the_bench_prints_both_paths_and_the_same_log(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    fastpath.main(["--events", "3000", "--nodes", "64", "--rounds", "1", "--seed", "7"])
    text = capsys.readouterr().out
    assert "fleet mix: 3000 events, 64 nodes" in text
    assert "slow path (baseline)" in text and "fast path" in text
    assert "same incident log: yes" in text
