"""Dashboards checked offline: committed JSON is the built JSON, the SDK round trip is clean,
targets lint, and every panel's SQL, expanded as the plugin expands it, runs against the real
schema in chDB on the sample scenario with the columns its format needs."""

from __future__ import annotations

import copy
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dashboards.build import built, committed
from dashboards.check import ANNOTATION_COLUMNS, COLUMNS, expand, lint, roundtrip, targets
from dashboards.interpolate import ALL, Chosen, conditional_all, macros, variables
from ingest.canonical import decode
from jobtrail.learn import sample
from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.pipeline import Pipeline
from processors.topology import Topology
from schemas.topology import TopologyFile
from tests.conftest import OBSERVED

warnings.filterwarnings("ignore", category=DeprecationWarning)

# panels the sample scenario must fill (the fleet's change and acknowledge panels may be empty)
MUST_SHOW = {
    "job": {"Summary", "Why it failed", "Across systems", "Event stream",
            "Attempts and phases", "Progress and checkpoints",
            "Nodes, links and filesystems", "Incidents touching the job",
            "Queue wait and reasons", "Incidents"},
    "incident": {"Status, cause and owner", "Impact", "Impacted jobs", "Incident log",
                 "Evidence", "Recovery milestones", "Postmortem"},
    "fleet": {"Open incidents", "Incidents by class", "Incidents by owner",
              "Lost GPU-hours by cause and owner", "Time to detect, acknowledge, recover",
              "Queue wait by reason", "Repeat offenders: nodes and links",
              "Waiting GPU-hours by queue and cause",
              "Goodput by project: run and failure GPU-hours",
              "Node MTBI: mean time between incidents"},
}


@pytest.fixture
def scenario(store: Store, tmp_path: Path) -> dict[str, Any]:
    wiring = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    runner = EmbeddedRunner(Sink(store, Pipeline(timedelta(seconds=30), wiring)),
                            EmbeddedLog(tmp_path / "log"))
    runner.submit(decode(sample.jsonl(), producer="sample", observed_at=OBSERVED))
    runner.drain()
    worst = max(store.incidents(None), key=lambda r: r["lost_gpu_hours"])
    return {"project": sample.PROJECT, "job": sample.JOB, "attempt": Chosen(ALL, ("1", "2")),
            "incident": worst["incident_id"]}


def test_committed_json_is_what_the_builders_build() -> None:
    assert committed() == built(), "run `jobtrail dashboards build` and commit dashboards/json"


@pytest.mark.parametrize("name", ["job", "incident", "fleet", "entity", "oncall"])
def test_sdk_round_trip_and_lint_are_clean(name: str) -> None:
    board = built()[name]
    assert roundtrip(board) == []
    assert lint(board) == []


def test_lint_catches_what_grafana_would_show_as_an_error() -> None:
    board = copy.deepcopy(built()["job"])
    panels = {p["title"]: p for p in board["panels"]}
    panels["Event stream"]["targets"][0]["format"] = 1  # a logs panel fed a table
    panels["Attempts and phases"]["targets"][0]["rawSql"] += " AND $__timeFilterMs(x)"
    panels["Progress and checkpoints"]["targets"][0]["rawSql"] += \
        " AND node = ${nodee:sqlstring} AND x = ${job:percentencode}"
    panels["Nodes, links and filesystems"]["id"] = panels["Incidents touching the job"]["id"]
    problems = lint(board)
    assert any("format 1 cannot be drawn by a logs panel" in p for p in problems)
    assert any("unknown macro $__timeFilterMs" in p for p in problems)
    assert any("$nodee is not a dashboard variable" in p for p in problems)
    assert any("format 'percentencode' is not one" in p for p in problems)
    assert any("panel ids must be set and unique" in p for p in problems)


def test_lint_catches_a_panel_off_the_grid_or_on_another() -> None:
    """Defect 4: the fleet's last panel sat at x 22 with width 14. Every panel must lie in
    the 24 columns and overlap none."""
    board = copy.deepcopy(built()["fleet"])
    last, before = board["panels"][-1], board["panels"][-2]
    last["gridPos"] = {**last["gridPos"], "x": 22, "w": 14}
    assert any("x 22 + width 14 overflows the 24-column grid" in p for p in lint(board))
    last["gridPos"] = dict(before["gridPos"])
    assert any(f"overlaps panel {before['title']!r}" in p for p in lint(board))
    for name, b in built().items():
        assert not [p for p in lint(b) if "grid" in p or "overlap" in p], name


def test_lint_catches_an_alias_that_hides_the_filtered_column() -> None:
    """Defect 1's class: `concat(...) AS attempt` made ClickHouse read the filter's
    `toString(attempt)` as the alias. A subquery's alias of the same name is its own scope."""
    board = copy.deepcopy(built()["job"])
    (steps,) = [p for p in board["panels"] if p["title"] == "Progress and checkpoints"]
    steps["targets"][0]["rawSql"] = steps["targets"][0]["rawSql"].replace(" AS series",
                                                                          " AS attempt")
    assert any("alias 'attempt'" in p and "hides the column the filter binds" in p
               for p in lint(board))
    assert lint(built()["job"]) == []  # the summary's `(SELECT max(attempt) ...) AS attempt`


def test_lint_catches_a_link_to_a_variable_the_target_does_not_define() -> None:
    boards = built()
    board = copy.deepcopy(boards["incident"])
    (jobs,) = [p for p in board["panels"] if p["title"] == "Impacted jobs"]
    link = jobs["fieldConfig"]["defaults"]["links"][0]
    link["url"] = link["url"].replace("var-attempt=", "var-try=")
    assert any("var-try is not a variable of jobtrail-job" in p for p in lint(board))
    link["url"] = "/d/jobtrail-nowhere?var-job=x"
    assert any("no dashboard with uid jobtrail-nowhere" in p for p in lint(board))


def test_checkpoints_are_markers_in_the_legend() -> None:
    """Defect 5: checkpoints were drawn as a line joining saves across attempts, with the
    legend hidden. Target B (checkpoints) is drawn as points, target A (steps, a series per
    attempt) as lines, and the legend is shown."""
    (progress,) = [p for p in built()["job"]["panels"]
                   if p["title"] == "Progress and checkpoints"]
    assert [t["refId"] for t in progress["targets"]] == ["A", "B"]
    assert "AS checkpoint" in progress["targets"][1]["rawSql"]
    assert progress["options"]["legend"]["showLegend"] is True
    overrides = {o["matcher"]["options"]: {p["id"]: p["value"] for p in o["properties"]}
                 for o in progress["fieldConfig"]["overrides"]
                 if o["matcher"]["id"] == "byFrameRefID"}
    assert overrides["B"]["custom.drawStyle"] == "points"
    assert overrides["B"]["custom.showPoints"] == "always"
    assert progress["fieldConfig"]["defaults"]["custom"].get("drawStyle", "line") == "line"


def test_expansion_matches_the_plugin() -> None:
    """Cases from the plugin's and Grafana's own tests, verbatim: grafana/clickhouse-datasource
    4.20.0 `pkg/macros/macros_test.go` and `src/data/CHDatasource.test.ts` ("Conditional
    All"), grafana/scenes `formatRegistry.test.ts` (sqlstring, singlequote)."""
    from datetime import UTC, datetime

    start = datetime(2014, 11, 12, 11, 45, 26, 371000, tzinfo=UTC)
    end = datetime(2015, 11, 12, 11, 45, 26, 371000, tzinfo=UTC)
    one_minute = timedelta(minutes=1)
    assert macros("$__fromTime", start, end, one_minute) == "toDateTime(1415792726)"
    assert macros("$__toTime", start, end, one_minute) == "toDateTime(1447328726)"
    assert macros("$__fromTime_ms", start, end, one_minute) == \
        "fromUnixTimestamp64Milli(1415792726371)"
    assert macros("$__timeFilter(col)", start, end, one_minute) == \
        "col >= toDateTime(1415792726) AND col <= toDateTime(1447328726)"
    assert macros("$__dateFilter(col)", start, end, one_minute) == \
        "col >= toDate('2014-11-12') AND col <= toDate('2015-11-12')"
    assert macros("$__timeInterval_ms(t) $__interval_s", start, end, one_minute) == \
        "toStartOfInterval(toDateTime64(t, 3), INTERVAL 60000 millisecond) 60"
    assert macros("$__timeFilterMs(x) -- $__fromTime", start, end, one_minute) == \
        "$__timeFilterMs(x)" + " " * 15  # unknown is kept; a comment is blanked
    with pytest.raises(ValueError, match="expected 1 argument"):
        macros("$__timeFilter()", start, end, one_minute)
    sql = "select stuff from table where $__conditionalAll(fieldVal in ($fieldVal), $fieldVal);"
    assert conditional_all(sql, {"fieldVal": ALL}) == "select stuff from table where 1=1;"
    assert conditional_all(sql, {"fieldVal": "'val1', 'val2'"}) == \
        "select stuff from table where fieldVal in ($fieldVal);"
    both = ("select stuff from table where $__conditionalAll(fieldVal in ($fieldVal), "
            "$fieldVal) and $__conditionalAll(fieldVal in ($fieldVal2), $fieldVal2);")
    assert conditional_all(both, {"fieldVal": "'val1', 'val2'", "fieldVal2": ALL}) == \
        "select stuff from table where fieldVal in ($fieldVal) and 1=1;"
    assert variables("${v:sqlstring}", {"v": "test'value"}, start, end) == "'test''value'"
    assert variables("${v:sqlstring}", {"v": 'test"value'}, start, end) == "'test\\\"value'"
    assert variables("${v:singlequote}", {"v": ["test", "test'2"]}, start, end) == \
        "'test','test\\'2'"
    # All: every option; a custom all value is inserted raw whatever the format
    assert variables("${a:singlequote} $a", {"a": Chosen(ALL, ("1", "2"))}, start, end) == \
        "'1','2' '1','2'"
    assert variables("${a:sqlstring}", {"a": Chosen(ALL, ("1",), all_value="all")}, start,
                     end) == "all"
    assert variables("$a", {"a": "it's"}, start, end) == "it's"  # the plugin's format: raw
    f, t = int(sample.T0.timestamp()), int((sample.T0 + timedelta(hours=1)).timestamp())
    sql = expand("SELECT 1 WHERE $__timeFilter_ms(time) AND job_id = ${job:sqlstring} AND "
                 "x IN (${teams:singlequote}) AND $__timeFilter(d) GROUP BY "
                 "$__timeInterval_ms(time)", {"job": "it's", "teams": ["a", "b"]}, sample.T0,
                 sample.T0 + timedelta(hours=1), 30)
    assert sql == (f"SELECT 1 WHERE time >= fromUnixTimestamp64Milli({f * 1000}) AND "
                   f"time <= fromUnixTimestamp64Milli({t * 1000}) AND job_id = 'it''s' AND "
                   f"x IN ('a','b') AND d >= toDateTime({f}) AND d <= toDateTime({t}) "
                   "GROUP BY toStartOfInterval(toDateTime64(time, 3), INTERVAL 30000 "
                   "millisecond)")


@pytest.mark.parametrize("name", ["job", "incident", "fleet"])
def test_every_panel_runs_on_the_sample_scenario(name: str, store: Store,
                                                 scenario: dict[str, Any]) -> None:
    board = built()[name]
    start, end = sample.T0 - timedelta(hours=1), sample.T0 + timedelta(hours=4)
    filled = set()
    for kind, title, target in targets(board):
        query = expand(target["rawSql"], scenario, start, end, 60)
        result = store.client.query(query)
        columns = set(result.column_names)
        needed = ANNOTATION_COLUMNS if kind == "annotation" else COLUMNS.get(target["format"],
                                                                             set())
        assert needed <= columns, f"{name}/{title}: missing {needed - columns}"
        if result.result_rows:
            filled.add(title)
    assert MUST_SHOW[name] <= filled, f"{name}: empty panels {MUST_SHOW[name] - filled}"
    for variable in board.get("templating", {}).get("list", []):
        if variable["type"] == "constant":  # a value, not a query
            continue
        rows = store.client.query(expand(variable["query"], scenario, start, end)).result_rows
        assert rows, f"variable {variable['name']} has no values on the sample"


def test_the_attempt_variable_narrows_the_job_panels(store: Store,
                                                     scenario: dict[str, Any]) -> None:
    board = built()["job"]
    start, end = sample.T0 - timedelta(hours=1), sample.T0 + timedelta(hours=4)
    (stream,) = [t for _, title, t in targets(board) if title == "Event stream"]
    counts = {}
    for attempt in (ALL, "1", "2"):
        query = expand(stream["rawSql"], {**scenario, "attempt": Chosen(attempt, ("1", "2"))},
                       start, end)
        counts[attempt] = len(store.client.query(query).result_rows)
    assert counts["1"] and counts["2"] and counts["1"] + counts["2"] == counts[ALL]


def test_the_job_dashboard_opens_with_the_summary_and_the_incident_that_explains_it(
        store: Store, scenario: dict[str, Any]) -> None:
    from dashboards import job

    board = built()["job"]
    top = sorted(board["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    assert [p["title"] for p in top[:2]] == ["Summary", "Why it failed"]
    assert all(p["gridPos"]["y"] + p["gridPos"]["h"] <= 8 for p in top[:2])  # above the fold
    start, end = sample.T0 - timedelta(hours=1), sample.T0 + timedelta(hours=4)

    def rows(sql: str, **given: str) -> list[dict[str, Any]]:
        result = store.client.query(expand(sql, {**scenario, **given}, start, end, 60))
        return [dict(zip(result.column_names, r, strict=True)) for r in result.result_rows]

    attempts = {a["attempt"]: a for a in store.client.query(
        "SELECT attempt, state, ended_at FROM job_attempts FINAL WHERE job_id = "
        f"'{sample.JOB}'").named_results()}
    steps = [(r["time"], r["attrs"]) for r in store.client.query(
        "SELECT time, JSONExtractInt(attributes, 'step') AS attrs FROM job_timeline FINAL "
        f"WHERE job_id = '{sample.JOB}' AND type = 'job.step' ORDER BY time").named_results()]
    (summary,) = rows(job.SUMMARY)
    assert summary["attempt"] == max(attempts) == 2
    assert summary["state"] == attempts[2]["state"]
    assert summary["last_step"] == steps[-1][1]
    assert summary["lost_gpu_hours"] == round(sum(
        r["lost_gpu_hours"] for r in store.incidents(None)), 2) > 0
    (why,) = rows(job.WHY)
    assert why["incident"] == scenario["incident"] and why["attempt"] == 1
    assert why["cause"] and why["owner"] and why["failed_at"] is not None
    if why["status"] not in ("resolved", "closed"):
        assert summary["open_incident"].endswith(f"({scenario['incident']})")
    # the first attempt on its own: failed, its checkpoint's age taken at its end
    (first,) = rows(job.SUMMARY, attempt="1")
    assert (first["attempt"], first["state"]) == (1, attempts[1]["state"])
    saved = store.client.query(
        "SELECT max(time) FROM job_timeline FINAL WHERE attempt = 1 AND job_id = "
        f"'{sample.JOB}' AND type = 'checkpoint.saved'").result_rows[0][0]
    assert first["checkpoint_age_min"] == round(
        (attempts[1]["ended_at"] - saved).total_seconds() / 60, 1)


def test_the_job_timeline_renders_to_png_from_the_dashboard_queries(
        store: Store, scenario: dict[str, Any], tmp_path: Path) -> None:
    from dashboards.png import render

    out = tmp_path / "job.png"
    counts = render(store, sample.PROJECT, sample.JOB, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    assert counts["attempts"] == 2 and counts["incidents"] == 1
    assert counts["bands"] == len(store.timeline(sample.PROJECT, sample.JOB))
    assert counts["steps"] > 10 and counts["checkpoints"] > 0
    with pytest.raises(ValueError, match="no timeline rows"):
        render(store, sample.PROJECT, "no-such-job", tmp_path / "none.png")


def test_the_png_breaks_the_step_line_and_marks_the_failure(store: Store,
                                                          scenario: dict[str, Any]) -> None:
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    from dashboards.png import figure

    fig, counts = figure(store, sample.PROJECT, sample.JOB)
    attempts = {a["attempt"]: a for a in store.client.query(
        "SELECT attempt, submitted_at, started_at, ended_at FROM job_attempts FINAL "
        f"WHERE job_id = '{sample.JOB}'").named_results()}
    (failed,) = store.client.query(
        "SELECT incident_id, attempt, failed_at FROM incident_jobs FINAL WHERE role = 'failed' "
        f"AND job_id = '{sample.JOB}'").named_results()
    top, bottom = fig.axes
    try:
        def gid(axis: Any, prefix: str) -> dict[str, Any]:
            return {str(a.get_gid()): a for a in axis.get_children()
                    if str(a.get_gid()).startswith(prefix)}

        lines = gid(bottom, "steps-")
        assert sorted(lines) == ["steps-attempt-1", "steps-attempt-2"]
        for number, a in attempts.items():  # each line stays within its attempt
            xs = lines[f"steps-attempt-{number}"].get_xdata()
            assert len(xs) and mdates.date2num(a["started_at"]) <= mdates.date2num(min(xs))
            assert mdates.date2num(max(xs)) <= mdates.date2num(a["ended_at"])
        assert sum(len(line.get_xdata()) for line in lines.values()) == counts["steps"]
        bands = gid(top, "attempt-")
        assert sorted(bands) == ["attempt-1", "attempt-2"]
        for number, a in attempts.items():  # from its start, not its submission
            assert a["submitted_at"] < a["started_at"]
            left = bands[f"attempt-{number}"].get_x()  # a Rectangle since matplotlib 3.9
            assert left == pytest.approx(mdates.date2num(a["started_at"]), abs=1e-8)  # ~1 ms
        marks = gid(top, f"failure-{failed['incident_id']}-")
        assert list(marks) == [f"failure-{failed['incident_id']}-1"]
        at = marks[f"failure-{failed['incident_id']}-1"].get_xdata()[0]
        assert mdates.date2num(at) == pytest.approx(mdates.date2num(failed["failed_at"]),
                                                    abs=1e-8)
        (label,) = gid(top, "failure-label-").values()
        assert label.get_text().strip().startswith(
            f"attempt 1 failed {failed['failed_at']:%H:%M:%S}: sev1 network on leaf-05/p9")
        assert counts["failures"] == 1
    finally:
        plt.close(fig)


def test_postmortem_and_followup_panels_show_what_commanders_did(store: Store,
                                                                 tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from dashboards import fleet, incident
    from processors.incidents.model import Actor, Command

    wiring = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    sink = Sink(store, Pipeline(timedelta(seconds=30), wiring))
    runner = EmbeddedRunner(sink, EmbeddedLog(tmp_path / "log"))
    runner.submit(decode(sample.jsonl(), producer="sample", observed_at=OBSERVED))
    runner.drain()
    worst = max(store.incidents(None), key=lambda r: r["lost_gpu_hours"])
    inc = worst["incident_id"]
    assert worst["severity"] == "sev1"
    now = datetime.now(UTC)
    for n, (command, data) in enumerate([
            ("draft_postmortem", {"owner": "ic-ana"}),
            ("add_action", {"title": "Audit optics", "owner": "network", "due": "2026-01-05",
                            "kind": "prevent", "tracker": "https://tracker.example/NET-1"}),
            ("add_action", {"title": "Add a link-flap alert", "owner": "network",
                            "due": "2999-01-01", "kind": "detect"})]):
        sink.command(Command(command_id=f"c{n}", incident_id=inc, command=command,  # type: ignore[arg-type]
                             actor=Actor(kind="person", name="ic-ana"), time=now, data=data))
    chosen = {"project": sample.PROJECT, "job": sample.JOB, "attempt": Chosen(ALL),
                 "incident": inc}
    start, end = sample.T0 - timedelta(hours=1), sample.T0 + timedelta(hours=4)

    def rows(sql: str) -> list[dict[str, Any]]:
        result = store.client.query(expand(sql, chosen, start, end, 60))
        return [dict(zip(result.column_names, r, strict=True)) for r in result.result_rows]

    (pm,) = rows(incident.POSTMORTEM)
    assert (pm["postmortem"], pm["owner"]) == ("draft", "ic-ana") and pm["due"]
    actions = {r["title"]: r for r in rows(incident.ACTIONS)}
    assert actions["Audit optics"]["overdue"] and not actions["Add a link-flap alert"]["overdue"]
    assert actions["Audit optics"]["tracker"] == "https://tracker.example/NET-1"
    teams = {r["team"]: r for r in rows(fleet.FOLLOWUPS)}
    assert teams["network"]["overdue"] == 1 and teams["network"]["oldest_overdue_due"] \
        == "2026-01-05"
    waiting = {r["incident"]: r for r in rows(fleet.POSTMORTEMS)}
    assert waiting[inc]["postmortem"] == "draft"
