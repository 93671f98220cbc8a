"""Every query of every dashboard, run as Grafana would run it on a real store, and what the
boards say compared with what the CLI says about the same incident, job and entity.

The stores are the demo and scenario files (`tests/dashboard_kit.py`: an attempt that never
waited, one still running, one still waiting, five jobs in one incident, two projects on one
node). Each target, annotation and variable query is expanded as the ClickHouse plugin
expands it (`dashboards.interpolate`), at every attempt and at All, and must run, return the
columns its format and its links need, and agree with the CLI.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dashboards.build import built
from dashboards.interpolate import ALL
from tests.dashboard_kit import QUERIES, STORIES, Story, load, ts

warnings.filterwarnings("ignore", category=DeprecationWarning)


@pytest.fixture(scope="module")
def stories(chdb_path: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, Story]]:
    work = tmp_path_factory.mktemp("stories")
    loaded = {name: load(name, chdb_path, work / name) for name in STORIES}
    yield loaded
    for story in loaded.values():
        story.store.client.command(f"DROP DATABASE IF EXISTS {story.store.database}")


def _views(story: Story, name: str) -> Iterator[dict[str, Any]]:
    """The selections a person makes on board `name`: every job at every attempt and at
    All, every incident, every entity the links lead to (at All and per project)."""
    if name == "job":
        for project, job, attempts in story.jobs():
            for attempt in [ALL, *map(str, attempts)]:
                yield {"project": project, "job": job, "attempt": attempt}
    elif name == "incident":
        for incident in story.incidents():
            yield {"incident": incident}
    elif name == "entity":
        projects = sorted({p for p, _, _ in story.jobs()})
        for entity in story.entities():
            yield {"entity": entity, "project": [ALL]}
            for project in projects:
                yield {"entity": entity, "project": [project]}
    else:
        yield {}


@pytest.mark.parametrize("name", ["job", "incident", "fleet", "entity", "oncall"])
def test_every_query_of_every_board_runs_on_every_story(stories: dict[str, Story],
                                                        name: str) -> None:
    board = built()[name]
    before = QUERIES[board["uid"]]
    filled: set[str] = set()
    for story in stories.values():
        for chosen in _views(story, name):
            view = story.board(board).select(**chosen)
            for key, result in view.run().items():
                if result.rows:
                    filled.add(key)
    ran = QUERIES[board["uid"]] - before
    print(f"{name}: {ran} queries")
    every = {f"{title}/{t['refId']}" for _, title, t in __import__(
        "dashboards.check", fromlist=["targets"]).targets(board)}
    assert every <= filled, f"{name}: never filled on any story: {sorted(every - filled)}"


def _steps(story: Story, project: str, job: str, attempt: int | None = None
           ) -> list[tuple[Any, int]]:
    """`jobtrail timeline JOB --project P [--attempt N] --json`: its job.step rows."""
    args = ["timeline", job, "--project", project, "--json",
            "--since", story.start.isoformat(), "--until", story.end.isoformat()]
    rows = story.cli_lines(*args, *(["--attempt", str(attempt)] if attempt else []))
    return sorted((ts(r["time"]), r["attributes"]["step"]) for r in rows
                  if r["type"] == "job.step")


def test_choosing_an_attempt_keeps_its_step_line(stories: dict[str, Story]) -> None:
    """Defect 1: `... AS attempt` hid the filter's `toString(attempt)`, so any chosen
    attempt drew no step line. Each attempt's line is the CLI's steps of that attempt, and
    All is every attempt's, one series each."""
    board = built()["job"]
    checked = 0
    for story in stories.values():
        for project, job, attempts in story.jobs():
            everything = _steps(story, project, job)
            if not everything:
                continue
            view = story.board(board)
            shown = []
            for attempt in attempts:
                rows = view.select(project=project, job=job, attempt=str(attempt)).rows(
                    "Progress and checkpoints")
                assert sorted((ts(r["time"]), r["step"]) for r in rows) == \
                    _steps(story, project, job, attempt), (story.name, job, attempt)
                assert {r["series"] for r in rows} <= {f"attempt {attempt}"}
                shown += rows
                checked += bool(rows)
            every = view.select(project=project, job=job, attempt=ALL).rows(
                "Progress and checkpoints")
            assert sorted((ts(r["time"]), r["step"]) for r in every) == everything
            assert len(every) == len(shown)
    assert checked >= 10


def _links_into_the_job_board(story: Story) -> list[str]:
    """The job-timeline links people are sent: every message an all-incidents subscription
    gets (`processors.notify`) and every postmortem page's (`jobtrail.views.postmortem`)."""
    import html
    from datetime import timedelta

    from jobtrail.views.postmortem import facts, state
    from processors.notify.decide import decide
    from processors.notify.message import Links, message
    from processors.notify.model import Subscription

    links = Links("https://jt.example", "https://gf.example")
    logs = {i: story.store.incident_log(i) for i in story.incidents()}
    everyone = Subscription.model_validate({
        "id": "sub-all", "name": "all", "owner": "team:oncall", "matchers": [],
        "channel": {"kind": "webhook", "target": "env:HOOK"}})
    out = [message(everyone, d, logs[d.incident_id], links)["links"]["timeline"]
           for d in decide([everyone], [], logs, story.end + timedelta(days=1))
           if d.status == "pending"]
    for log in logs.values():
        inc = state(log)
        assert inc is not None
        found = re.search(r'id="link-timeline" href="([^"]+)"', facts(inc, links))
        out += [html.unescape(found.group(1))] if found else []
    return [u for u in out if u]


def test_alert_and_postmortem_links_open_the_attempt_with_its_step_line(
        stories: dict[str, Story]) -> None:
    """Defect 1, as people meet it: every alert and postmortem link passes `var-attempt`;
    opened as linked (its variables, its time range) the board draws the CLI's steps of that
    attempt, and the link names only variables the job board defines."""
    from datetime import UTC, datetime
    from urllib.parse import parse_qs, urlsplit

    board = built()["job"]
    defined = {v["name"] for v in board["templating"]["list"]}
    drawn = 0
    for story in stories.values():
        for url in _links_into_the_job_board(story):
            parts = urlsplit(url)
            assert parts.path == f"/d/{board['uid']}", url
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            given = {k[4:]: v for k, v in query.items() if k.startswith("var-")}
            assert set(given) <= defined and "attempt" in given, url
            view = story.board(board)
            view.start = datetime.fromtimestamp(int(query["from"]) / 1000, UTC)
            view.end = datetime.fromtimestamp(int(query["to"]) / 1000, UTC)
            rows = view.select(**given).rows("Progress and checkpoints")
            want = [s for s in _steps(story, given["project"], given["job"],
                                      int(given["attempt"])) if view.start <= s[0] <= view.end]
            assert sorted((ts(r["time"]), r["step"]) for r in rows) == want, url
            drawn += bool(want)
    assert drawn >= 5


def _capacity(story: Story) -> dict[str, float]:
    """`jobtrail report capacity` over every project of the story, over the board's range:
    waiting GPU-hours per queue (its causes summed)."""
    projects = sorted({p for p, _, _ in story.jobs()})
    text = story.cli("report", "capacity", *[a for p in projects for a in ("--project", p)],
                     "--since", story.start.isoformat(), "--until", story.end.isoformat())
    out: dict[str, float] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 3 and re.fullmatch(r"[\d.]+", cells[2]):
            out[cells[0]] = out.get(cells[0], 0.0) + sum(float(c) for c in cells[2:])
    return out


def test_waiting_gpu_hours_for_the_whole_fleet_when_an_attempt_never_waited(
        stories: dict[str, Story]) -> None:
    """Defect 2: one attempt started without pending and the fleet's waiting panel failed
    for everyone (`Sizes of ARRAY-JOIN-ed arrays do not match`). It runs on every story and
    its GPU-hours per queue are the capacity report's."""
    board = built()["fleet"]
    never = stories["loss-held-then-queued"].store.client.query(
        "SELECT countIf(empty(pending_times)), countIf(notEmpty(pending_times)) "
        "FROM job_attempts FINAL").result_rows[0]
    assert never[0] and never[1]  # the story has both kinds
    compared = 0
    for story in stories.values():
        rows = story.board(board).select().rows("Waiting GPU-hours by queue and cause")
        shown: dict[str, float] = {}
        for r in rows:
            shown[r["queue"]] = shown.get(r["queue"], 0.0) + r["waiting_gpu_hours"]
        report = _capacity(story)
        assert set(shown) == {q for q, h in report.items() if h > 0}, story.name
        for queue, hours in report.items():  # the report prints one decimal per cause
            assert shown.get(queue, 0.0) == pytest.approx(hours, abs=0.05 * 6), (story.name,
                                                                                   queue)
            compared += hours > 0
    assert compared >= 2  # the demo's queue and the story's


def test_checkpoint_age_of_a_running_attempt_counts_to_now(stories: dict[str, Story]) -> None:
    """Defect 3: a running attempt's checkpoint age was taken at the previous attempt's end
    (12.0 min shown on ecc-uncorrectable, 45.0 true at the range's end). The age is from the
    newest checkpoint `jobtrail attempt` lists as saved by this or an earlier attempt, to the
    attempt's end or, while it runs, to the end of the range."""
    board = built()["job"]
    running = 0
    for story in stories.values():
        for project, job, attempts in story.jobs():
            ended = {a.attempt: a.ended_at for a in story.store.attempts(project, job)}
            saved: list[Any] = []
            for attempt in attempts:
                listed = story.cli_json("attempt", job, str(attempt), "--project", project)
                saved += [ts(c["time"]) for c in listed["checkpoints"]
                          if c["type"] == "checkpoint.saved"]
                at = ts(ended[attempt]) if ended[attempt] else story.end
                before = [t for t in saved if t <= at]
                want = round((at - max(before)).total_seconds() / 60, 1) if before else None
                view = story.board(board)
                choices = [str(attempt)] + ([ALL] if attempt == attempts[-1] else [])
                for choice in choices:
                    (summary,) = view.select(project=project, job=job, attempt=choice).rows(
                        "Summary")
                    assert summary["checkpoint_age_min"] == want, (story.name, job, choice)
                    assert summary["attempt"] == attempt
                running += want is not None and ended[attempt] is None
    assert running >= 3
    ecc = stories["ecc-uncorrectable"]
    (summary,) = ecc.board(board).select(project="llm-pretrain", job="ft", attempt=ALL).rows(
        "Summary")
    assert (summary["state"], summary["checkpoint_age_min"]) == ("running", 45.0)
