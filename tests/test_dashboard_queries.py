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
from dashboards.check import targets
from dashboards.interpolate import ALL
from tests.dashboard_kit import QUERIES, STORIES, Story, load, ts

warnings.filterwarnings("ignore", category=DeprecationWarning)


@pytest.fixture(scope="module")
def stories(chdb_path: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, Story]]:
    work = tmp_path_factory.mktemp("stories")
    loaded = {name: load(name, chdb_path, work / name) for name in STORIES}
    yield loaded
    print("\nqueries run per dashboard:", dict(sorted(QUERIES.items())))
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
    every = {f"{title}/{t['refId']}" for _, title, t in targets(board)}
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


# --- what the boards say, against what the CLI says ---------------------------------------

def _shown(story: Story, incident: str) -> dict[str, Any]:
    """`jobtrail incident show ID --json`."""
    found: dict[str, Any] = story.cli_json("incident", "show", incident, "--json")
    return found


def _listed(story: Story, *args: str) -> list[dict[str, Any]]:
    """`jobtrail incidents --all --json` (infrastructure-only incidents too)."""
    return story.cli_lines("incidents", "--all", "--json", *args)


def _in_range(story: Story, row: dict[str, Any]) -> bool:
    return story.start <= ts(row["opened_at"]) <= story.end


_TOLD = re.compile(r"time to (\w+) \*\*(.+?)\*\*", re.I)


def _response_told(story: Story, incident: str) -> dict[str, str]:
    """The postmortem's headline figures as `jobtrail postmortem show ID --json` prints
    them (`time to acknowledge **4m 40s**`)."""
    doc = story.cli_json("postmortem", "show", incident, "--json")
    (timings,) = [s["text"] for s in doc["sections"] if s["name"] == "timings"]
    first = timings.splitlines()[0]
    return {name.lower(): text for name, text in _TOLD.findall(first)}


def _inclusive(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def test_fleet_incident_board_and_postmortem_agree_on_response_times(
        stories: dict[str, Story]) -> None:
    """The fleet counted acknowledge from the opening and recover per job from its failure
    to its verified recovery; the postmortem counts both from the first signal, recover to
    progress resumed. One definition now: each incident's figures on its board are what
    `jobtrail postmortem show` prints, and the fleet's medians are taken over them."""
    from processors.postmortem.text import duration

    fleet, one = built()["fleet"], built()["incident"]
    phases = {"detect": "1 detect", "acknowledge": "2 acknowledge", "mitigate": "3 mitigate",
              "recover": "4 recover", "resolve": "5 resolve"}
    acknowledged = 0
    for story in stories.values():
        seconds: dict[str, list[float]] = {p: [] for p in phases}
        view = story.board(one)
        for row in _listed(story):
            shown = _shown(story, row["incident_id"])
            if "drill" in shown["flags"] or not _in_range(story, row):
                continue
            (board,) = view.select(incident=row["incident_id"]).rows("Response times")
            told = _response_told(story, row["incident_id"])
            for name in phases:
                assert duration(board[f"{name}_s"]) == told[name], (story.name, name)
                if board[f"{name}_s"] is not None:
                    seconds[name].append(board[f"{name}_s"])
            acknowledged += board["acknowledge_s"] is not None
        rows = {r["phase"]: r for r in story.board(fleet).select().rows(
            "Time to detect, acknowledge, recover")}
        for name, phase in phases.items():
            if not seconds[name]:
                assert phase not in rows, (story.name, phase)
                continue
            got = rows[phase]
            assert got["n"] == len(seconds[name]), (story.name, phase)
            assert got["median_s"] == pytest.approx(round(_inclusive(seconds[name], 0.5), 1))
            assert got["p90_s"] == pytest.approx(round(_inclusive(seconds[name], 0.9), 1))
    assert acknowledged >= 1
    demo = {r["phase"]: r for r in stories["demo"].board(fleet).select().rows(
        "Time to detect, acknowledge, recover")}
    worst = max(_listed(stories["demo"]), key=lambda r: r["lost_gpu_hours"])
    told = _response_told(stories["demo"], worst["incident_id"])
    assert duration(demo["2 acknowledge"]["median_s"]) == told["acknowledge"] != "—"
    assert duration(demo["4 recover"]["median_s"]) == told["recover"] != "—"


def test_incident_board_says_what_incident_show_says(stories: dict[str, Story]) -> None:
    board = built()["incident"]
    jobs_seen = 0
    for story in stories.values():
        view = story.board(board)
        for incident in story.incidents():
            shown = _shown(story, incident)
            view.select(incident=incident)
            (summary,) = view.rows("Status, cause and owner")
            for key in ("status", "severity", "class", "entity", "owner"):
                assert summary[key] == shown[key], (story.name, incident, key)
            (impact,) = view.rows("Impact")
            assert (impact["impacted_jobs"], impact["impacted_gpus"], impact["lost_steps"]) \
                == (shown["impacted_jobs"], shown["impacted_gpus"], shown["lost_steps"])
            assert impact["lost_gpu_hours"] == round(shown["lost_gpu_hours"], 2)
            jobs = sorted((r["project"], r["job_id"], r["attempt"], r["role"],
                           r["lost_gpu_hours"]) for r in view.rows("Impacted jobs"))
            assert jobs == sorted((j["project"], j["job_id"], j["attempt"], j["role"],
                                   round(j["lost_gpu_hours"], 2)) for j in shown["jobs"])
            jobs_seen += len(jobs)
            milestones = {(r["job_id"], r["attempt"]): r for r in view.rows(
                "Recovery milestones")}
            for j in shown["jobs"]:
                if j["role"] != "failed":
                    continue
                got = milestones[(j["job_id"], j["attempt"])]
                for key in ("failed_at", "restarted_at", "resumed_at", "verified_at"):
                    assert (ts(got[key]) if got[key] else None) == \
                        (ts(j[key]) if j[key] else None), (story.name, incident, key)
                assert got["recovery"] == j["recovery"]
    assert jobs_seen >= 10


def test_fleet_says_what_incidents_says(stories: dict[str, Story]) -> None:
    """Lost GPU-hours by cause and owner, incidents by class and the open incidents are the
    CLI's (drills left out, as the fleet leaves them out)."""
    board = built()["fleet"]
    compared = 0.0
    for story in stories.values():
        view = story.board(board).select()
        listed = [r for r in _listed(story)
                  if "drill" not in _shown(story, r["incident_id"])["flags"]]
        lost: dict[tuple[str, str], tuple[float, int]] = {}
        for r in listed:
            if _in_range(story, r):
                hours, n = lost.get((r["class"], r["owner"]), (0.0, 0))
                lost[(r["class"], r["owner"])] = (hours + r["lost_gpu_hours"], n + 1)
        shown = {(r["cause"], r["owner"]): (r["lost_gpu_hours"], r["incidents"])
                 for r in view.rows("Lost GPU-hours by cause and owner")}
        assert shown == {k: (round(h, 2), n) for k, (h, n) in lost.items()}, story.name
        compared += sum(h for h, _ in lost.values())
        by_class: dict[str, int] = {}
        for r in view.rows("Incidents by class"):
            by_class[r["class"]] = by_class.get(r["class"], 0) + r["incidents"]
        assert by_class == {c: sum(n for (k, _), (_, n) in lost.items() if k == c)
                            for c in {k for k, _ in lost}}
        open_ = {r["incident"] for r in view.rows("Open incidents")}
        assert open_ == {r["incident_id"] for r in listed
                         if r["status"] not in ("resolved", "closed")}, story.name
    assert compared > 95  # the demo's 95.29 GPU-h and the stories'


def _timeline_states(story: Story, project: str, job: str) -> dict[int, str]:
    """`jobtrail timeline JOB --project P`: each attempt's header `attempt N: state`."""
    text = story.cli("timeline", job, "--project", project, "--no-colour")
    return {int(n): state for n, state in re.findall(r"attempt (\d+): (\w+)", text)}


def test_job_board_says_what_the_cli_says(stories: dict[str, Story]) -> None:
    """At each attempt and at All: the state `jobtrail timeline` prints, the last step of its
    rows, the GPU-hours `incident show` charges to the job, the incidents holding it, and
    each pending reason with its time."""
    board = built()["job"]
    checked = 0
    for story in stories.values():
        shown = {i: _shown(story, i) for i in story.incidents()}
        for project, job, attempts in story.jobs():
            states = _timeline_states(story, project, job)
            view = story.board(board)
            for choice in [ALL, *map(str, attempts)]:
                attempt = attempts[-1] if choice == ALL else int(choice)
                mine = [(i, j) for i, s in shown.items() for j in s["jobs"]
                        if (j["project"], j["job_id"]) == (project, job)
                        and (choice == ALL or j["attempt"] == attempt)]
                view.select(project=project, job=job, attempt=choice)
                (summary,) = view.rows("Summary")
                assert summary["attempt"] == attempt
                if attempt in states:
                    assert summary["state"] == states[attempt], (story.name, job, choice)
                steps = _steps(story, project, job, None if choice == ALL else attempt)
                assert summary["last_step"] == (steps[-1][1] if steps else 0)
                assert summary["lost_gpu_hours"] == pytest.approx(
                    round(sum(j["lost_gpu_hours"] for _, j in mine), 2), abs=0.011)
                touching = {r["incident"] for r in view.rows("Incidents touching the job")}
                assert touching == {i for i, _ in (
                    (i, j) for i, s in shown.items() for j in s["jobs"]
                    if (j["project"], j["job_id"]) == (project, job))}
                pending = sorted((ts(r["time"]), r["attributes"].get("reason", ""))
                                 for r in story.cli_lines(
                                     "timeline", job, "--project", project, "--json",
                                     *([] if choice == ALL else ["--attempt", choice]))
                                 if r["type"] == "job.pending")
                queue = sorted((ts(r["since"]), r["reason"]) for r in view.rows(
                    "Queue wait and reasons"))
                assert queue == pending, (story.name, job, choice)
                checked += 1
    assert checked >= 30


def test_entity_board_says_what_jobtrail_entity_says(stories: dict[str, Story]) -> None:
    """Each entity the links lead to, at All and per project: its events are `jobtrail
    entity NAME`'s for those projects, its attempts include every one whose timeline reached
    it, and its incidents are those `incident show` finds on it."""
    board = built()["entity"]
    events = 0
    for story in stories.values():
        projects = sorted({p for p, _, _ in story.jobs()})
        shown = {i: _shown(story, i) for i in story.incidents()}
        reached = {(p, j, r["attempt"], r["entity"])
                   for p, j, _ in story.jobs()
                   for r in story.cli_lines("timeline", j, "--project", p, "--json")
                   if r["relation"] != "self"}
        for entity in story.entities():
            for chosen in [projects, *([p] for p in projects)]:
                view = story.board(board).select(
                    entity=entity, project=[ALL] if chosen == projects else chosen)
                cli = story.cli_lines("entity", entity, "--json",
                                      *[a for p in chosen for a in ("--project", p)],
                                      "--since", story.start.isoformat(),
                                      "--until", story.end.isoformat())
                rows = view.rows("What happened on it")
                assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in cli), \
                    (story.name, entity, chosen)
                events += len(rows)
                attempts = {(r["project"], r["job_id"], r["attempt"])
                            for r in view.rows("Job attempts on it or reached through it")}
                assert {(p, j, a) for p, j, a, e in reached if p in chosen and (
                    e == entity or e.startswith(entity + "/"))} <= attempts
                assert {p for p, _, _ in attempts} <= set(chosen)
                on_it = {i for i, s in shown.items()
                         if (set(s["projects"]) & set(chosen) or not s["projects"])
                         and "withdrawn" not in s["flags"] and _in_range(story, s)
                         and (any(x == entity or x.startswith(entity + "/")
                                  for x in (s["entity"], s["cause_entity"]))
                              or any(e["entity"] == entity or e["entity"].startswith(
                                  entity + "/") for e in s["evidence"]))}
                assert {r["incident"] for r in view.rows("Incidents on it")} == on_it, \
                    (story.name, entity, chosen)
    assert events > 50


def test_entity_board_keeps_to_the_chosen_projects(stories: dict[str, Story]) -> None:
    """Two projects' jobs share node-001: chosen one, the board shows only its jobs and
    their events (and the node's own), never the other's."""
    story = stories["two-projects"]
    board = built()["entity"]
    for mine, theirs in (("llm-pretrain", "other"), ("other", "llm-pretrain")):
        view = story.board(board).select(entity="node-001", project=[mine])
        results = view.run()
        for key, result in results.items():
            for row in result.rows:
                assert row.get("project", "") in ("", mine), (key, row)
                assert theirs not in str(row.get("projects", "")), (key, row)
        jobs = {r["job_id"] for r in view.rows("Job attempts on it or reached through it")}
        assert jobs == {"a" if mine == "llm-pretrain" else "b"}
        assert any(r["project"] == "" for r in view.rows("What happened on it"))  # the node's
    both = story.board(board).select(entity="node-001", project=[ALL])
    assert {r["job_id"] for r in both.rows("Job attempts on it or reached through it")} == \
        {"a", "b"}


def test_oncall_board_says_what_the_cli_says(stories: dict[str, Story]) -> None:
    """Unacknowledged incidents are the open ones `jobtrail incidents` lists that nobody
    acknowledged, with their age at the end of the range; waiting and failing jobs are the
    latest attempts `jobtrail timeline` shows pending or ended badly; nodes out are the
    capacity report's open outages."""
    from jobtrail.reports.capacity_load import load as capacity
    from schemas.topology import TopologyFile

    board = built()["oncall"]
    seen = {"incidents": 0, "waiting": 0, "failed": 0, "nodes": 0}
    for story in stories.values():
        view = story.board(board).select()
        want = {}
        for r in _listed(story, "--status", "open"):
            s = _shown(story, r["incident_id"])
            if s["acknowledged_at"] is None and "drill" not in s["flags"]:
                want[r["incident_id"]] = round(
                    (story.end - ts(r["opened_at"])).total_seconds() / 60, 1)
        rows = view.rows("Unacknowledged incidents")
        assert {r["incident"]: r["age_min"] for r in rows} == want, story.name
        (counts,) = view.rows("Waiting for a person")
        assert counts["unacknowledged"] == len(want)
        seen["incidents"] += len(want)
        jobs = {(r["project"], r["job_id"]): r for r in view.rows("Jobs failing or waiting now")}
        for project, job, attempts in story.jobs():
            latest = story.store.attempts(project, job)[-1]
            states = _timeline_states(story, project, job)
            if latest.started_at is None and latest.ended_at is None:
                assert jobs[(project, job)]["state"] == "waiting"
                assert jobs[(project, job)]["attempt"] == attempts[-1]
                seen["waiting"] += 1
            elif latest.outcome in ("failed", "timeout", "preempted", "requeued") and \
                    story.start <= ts(latest.ended_at) <= story.end:
                assert jobs[(project, job)]["state"] == latest.outcome
                assert states.get(attempts[-1], latest.outcome) == latest.state
                seen["failed"] += 1
            else:
                assert (project, job) not in jobs, (story.name, job)
        projects = sorted({p for p, _, _ in story.jobs()})
        cluster, _ = capacity(story.store, TopologyFile.model_validate(story.topology),
                              projects, story.start, story.end)
        out = {o.node: o.start for o in cluster.outages if o.end is None}
        nodes = {r["node"]: ts(r["since"]) for r in view.rows("Nodes drained or not ready now")}
        assert nodes == {n: ts(t) for n, t in out.items()}, story.name
        seen["nodes"] += len(nodes)
    assert all(seen.values()), seen


def test_job_board_sources_say_what_completeness_measures(stories: dict[str, Story]) -> None:
    """At each attempt, the "Sources heard" panel's rows are the streams the completeness
    assessment reads: the same events and last time per rank log and node log, every node of
    the attempt listed (0 events for one that sent nothing)."""
    from jobtrail.store.completeness import attempt_completeness
    from processors.topology import Topology
    from schemas.topology import TopologyFile

    board = built()["job"]
    checked = 0
    for story in stories.values():
        topology = Topology.from_file(TopologyFile.model_validate(story.topology))
        view = story.board(board)
        for project, job, numbers in story.jobs():
            attempts = {a.attempt: a for a in story.store.attempts(project, job)}
            for number in numbers:
                assessed = attempt_completeness(story.store, topology, attempts[number])
                if assessed is None:
                    continue
                facts, _ = assessed
                view.select(project=project, job=job, attempt=str(number))
                rows = view.rows("Sources heard (what the timeline lacks)")
                shown = {(r["kind"], r["key"]): (r["events"], ts(r["last_heard"])
                                                 if r["last_heard"] else None) for r in rows}
                measured = {(h.kind, h.key): (h.count, h.last) for h in facts.heard
                            if h.kind in ("rank log", "node log", "scheduler")}
                assert {k: v for k, v in shown.items() if k[0] in (
                    "rank log", "scheduler") or (k[0] == "node log" and v[0])} == measured, (
                    story.name, job, number)
                assert {k for k, v in shown.items() if k[0] == "node log"} >= {
                    ("node log", n) for n in attempts[number].nodes}
                checked += 1
    assert checked >= 10
