"""`bench.storm` at a small size: the storm is one incident on the spine that went down,
holding every job the ranks timed out in; the baseline's progress lines open none."""

from __future__ import annotations

from datetime import datetime

from bench import storm


def test_a_small_storm_is_one_incident_on_the_spine_with_every_job() -> None:
    starts, load = storm.records(128, 64 * 16 + 1, storm=True)
    assert len(starts) == 16 and load[0]["entity"] == "spine-01"
    times = [datetime.fromisoformat(r["time"].replace("Z", "+00:00")) for r in load]
    assert times == sorted(times)  # in event-time order
    out = storm.run(128, 64 * 16 + 1, storm=True)
    assert out["events"] == 64 * 16 + 1 and out["opened_after_s"] is not None
    assert out["incidents"] == [("network", "spine-01", 16)]
    assert storm.run(128, 64 * 16, storm=False)["incidents"] == []
