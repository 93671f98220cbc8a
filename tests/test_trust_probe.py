"""An adversarial probe of the running service (this round's): each finding reproduced as an
attack, then shown to hold. Patterns people write run on RE2 (linear time); a shared
incident's log names no other project's jobs; a project's job-less events reach only its
own jobs; an acknowledge link obeys the same policy as the API; text printed to a terminal
carries no control characters; a Markdown export carries no raw HTML; a command id is its
author's."""

from __future__ import annotations

from pathlib import Path

import pytest

from processors.incidents.model import Incident
from processors.incidents.rules import Route, load_rules
from processors.notify.model import Matcher
from processors.timeline import TimelineRow
from schemas import patterns

# --- patterns: a catastrophic pattern is linear on RE2 -----------------------------------

EVIL = "(.|.|.|.|.)+!"  # on Python's backtracking engine: 5^n steps for n characters


def test_a_backtracking_bomb_in_a_subscription_matcher_answers_at_once() -> None:
    matcher = Matcher.parse(f"project=~{EVIL}")
    labels = {"project": ["a" * 5000], "team": ["ml"]}
    assert matcher.matches(labels) is False  # would not return on Python's `re`
    assert Matcher.parse(f"project!~{EVIL}").matches(labels) is True
    assert type(patterns.compile_pattern(EVIL)).__module__.startswith("re2")


def test_matchers_keep_alertmanager_s_anchored_meaning() -> None:
    labels = {"entity": ["node-03"]}
    assert Matcher.parse("entity=~node-0[1-4]").matches(labels)
    assert not Matcher.parse("entity=~node").matches(labels)  # anchored: all of the value
    assert Matcher.parse("entity=~(?i)NODE-0.").matches(labels)


@pytest.mark.parametrize("bad", [r"(a)\1", "(?=x)y", "(", "x" * 1001])
def test_patterns_re2_cannot_run_are_refused_when_written(bad: str) -> None:
    with pytest.raises(ValueError) as exc:
        Matcher.parse(f"entity=~{bad}")
    assert "entity=~" in str(exc.value)
    with pytest.raises(ValueError):
        Route.model_validate({"name": "r", "entity": bad, "team": "t"})


def test_a_backtracking_bomb_in_a_rules_file_answers_at_once() -> None:
    route = Route.model_validate({"name": "r", "entity": EVIL, "team": "t"})
    assert route.matches("network", "leaf-" + "a" * 5000) is False
    rules = load_rules()  # the planned-work pattern of a rules file runs the same way
    bomb = rules.model_copy(update={"planned_reasons": "(x+x+)+y"})
    assert patterns.search(bomb.planned_reasons, "x" * 5000) is False
    with pytest.raises(ValueError):
        type(rules).model_validate({**rules.model_dump(by_alias=True),
                                    "planned_reasons": r"(a)\1"})


# --- a shared incident's log names no other project's jobs, at any depth -------------------


def _job(project: str, job: str) -> dict[str, object]:
    return {"project": project, "job_id": job, "attempt": 1, "gpus": 512, "role": "failed",
            "failure_step": 2250, "last_checkpoint_step": 2000, "lost_gpu_hours": 12.5,
            "lost_steps": 250}


def test_a_shared_incident_s_log_hides_the_other_project_s_jobs_at_any_depth() -> None:
    """The probe read 1,396 references to the other tenant's job in `log[].data` of
    `diagnosis_revised` entries (the jobs and the evidence a revision weighed)."""
    import json

    from jobtrail.views.incident import detail

    mine, theirs = _job("llm-pretrain", "job-l"), _job("vision", "job-v")
    ours = {"type": "comm.nccl_timeout", "project": "llm-pretrain", "job_id": "job-l"}
    leaf = {"type": "network.port_down", "entity": "leaf-01", "project": ""}
    full = {
        "incident_id": "inc-1", "title": "network on leaf-01", "entity": "leaf-01",
        "explanation": "leaf-01 went down before vision/job-v/1 failed",
        "impacted_jobs": 2, "impacted_gpus": 1024, "lost_gpu_hours": 25.0,
        "jobs": [mine, theirs], "actions": [],
        "evidence": [leaf, ours, {"type": "comm.nccl_timeout", "project": "vision",
                                  "job_id": "job-v"}],
        "log": [{"kind": "diagnosis_revised", "data": {
            "jobs": [mine, theirs],
            "evidence": [leaf, ours, {"type": "comm.nccl_timeout", "project": "vision",
                                      "job_id": "job-v", "entity": "rank-8"}],
            "impact": {"project": "vision", "lost_gpu_hours": 12.5},
            "projects": ["llm-pretrain", "vision"],
            "why": "vision/job-v/1 and llm-pretrain/job-l/1 failed under leaf-01"}},
            {"kind": "job_impacted", "data": {"job": {"project": "vision", "job_id": "job-v",
                                                      "attempt": 1}}}]}
    shown = detail(full, ["llm-pretrain"])
    text = json.dumps(shown)
    assert "vision" not in text and "job-v" not in text, text
    (revision,) = shown["log"]
    assert revision["data"]["jobs"] == [mine] and revision["data"]["projects"] == ["llm-pretrain"]
    assert revision["data"]["evidence"] == [leaf, ours]  # the infrastructure's stays
    assert shown["other_projects"] == 1 and shown["impacted_jobs"] == 1
    assert detail(full, None) is full  # an operator sees everything


# --- a project's job-less events reach only its own jobs -------------------------------------


def _run(records: list[dict[str, object]]) -> tuple[list[TimelineRow], dict[str, Incident]]:
    import json
    from datetime import UTC, datetime, timedelta

    from ingest.canonical import decode
    from jobtrail.learn import sample
    from processors.incidents.model import fold
    from processors.pipeline import Pipeline
    from processors.topology import Topology
    from schemas.events import Event
    from schemas.topology import TopologyFile

    events = [e for e in decode("\n".join(json.dumps(r) for r in records), producer="t",
                                observed_at=datetime.now(UTC)) if isinstance(e, Event)]
    assert len(events) == len(records)
    pipeline = Pipeline(timedelta(seconds=30),
                        Topology.from_file(TopologyFile.model_validate(sample.topology())))
    out = pipeline.process(events)
    return list(out.timeline), dict(fold(out.incidents))


def _rec(type_: str, minute: int, project: str = "", job: str = "",
         **fields: object) -> dict[str, object]:
    out: dict[str, object] = {"type": type_, "time": f"2026-11-30T10:{minute:02d}:00Z",
                              "cluster": "cluster-a", **fields}
    if project:
        out["project"] = project
    if job:
        out.update(job_id=job, attempt=1)
    return out


def _xid(minute: int, node: str, project: str = "") -> dict[str, object]:
    return _rec("node.xid", minute, project, scope="gpu", entity=f"{node}/gpu3", node=node,
                severity="critical", message="NVRM: Xid 79, GPU has fallen off the bus",
                attributes={"xid": 79, "gpu": "3"})


def _a_job(node: str, project: str = "llm-pretrain",
           job: str = "job-a") -> list[dict[str, object]]:
    return [_rec("job.started", 0, project, job, attributes={"nodes": [node], "gpus": 8}),
            _rec("job.step", 1, project, job, attributes={"step": 10})]


def test_another_project_cannot_write_into_a_job_s_timeline_or_its_cause() -> None:
    """The probe: tenant B sent a GPU fault tagged with its own project and no job, on A's
    node; it landed in A's timeline and became the stated cause of A's incident, routed to
    hardware-ops, while A could not see the evidence."""
    rows, incidents = _run([*_a_job("node-050"), _xid(5, "node-050", project="vision"),
                            _rec("job.failed", 7, "llm-pretrain", "job-a",
                                 attributes={"exit_code": 1})])
    assert [r.event.type for r in rows if r.job_id == "job-a"] == [
        "job.started", "job.step", "job.failed"]
    (only,) = incidents.values()
    assert only.klass != "gpu_hardware" and "node-050" not in only.entity


def test_infrastructure_events_and_a_project_s_own_reports_still_reach_their_jobs() -> None:
    # an infrastructure event (no project: an @infra or operator credential) reaches A
    rows, incidents = _run([*_a_job("node-050"), _xid(5, "node-050"),
                            _rec("job.failed", 7, "llm-pretrain", "job-a",
                                 attributes={"exit_code": 1})])
    assert "node.xid" in [r.event.type for r in rows if r.job_id == "job-a"]
    assert [i.klass for i in incidents.values()] == ["gpu_hardware"]
    # a project reporting what it saw on its own job's node reaches that job
    rows, incidents = _run([*_a_job("node-060", "vision", "job-b"),
                            _xid(5, "node-060", project="vision"),
                            _rec("job.failed", 7, "vision", "job-b", attributes={"exit_code": 1})])
    assert "node.xid" in [r.event.type for r in rows if r.job_id == "job-b"]
    assert [i.klass for i in incidents.values()] == ["gpu_hardware"]


# --- an acknowledge link may do what its subscription's creator may ---------------------------


def _shared_incident(url: str) -> str:
    """Two tenants' jobs under one leaf that goes down (`test_trust`): their shared incident,
    sent by the operator's token."""
    import time as clock

    from tests.test_trust import _two_tenants_one_switch
    from tests.trust_kit import http, jsonl

    assert http("POST", f"{url}/v1/events", jsonl(_two_tenants_one_switch()),
                token="tok-ops").status == 202
    deadline = clock.monotonic() + 60
    while not (listed := http("GET", f"{url}/v1/incidents", token="tok-ops").body["incidents"]):
        assert clock.monotonic() < deadline, "no incident within a minute"
        clock.sleep(0.2)
    return str(listed[0]["incident_id"])


def test_an_ack_link_obeys_the_api_s_policy_and_records_who_clicked(tmp_path: Path) -> None:
    """The probe: a tenant's own subscription (owner written as `team:network`) received the
    link of a shared incident; the API refused the tenant's `ack` (403), the link accepted
    it, and the log said `team:network` did it. Now the link refuses what the API would, for
    the subscription's creator and for the person who clicks, and records that person."""
    import time as clock

    from jobtrail.alerts.links import ack_link
    from jobtrail.alerts.secrets import Secrets
    from tests.test_ack_link import _call
    from tests.test_trust import TOPOLOGY
    from tests.trust_kit import http, serve

    tokens = ("tok-llm=llm-pretrain,user:alice,role:responder;"
              "tok-both=llm-pretrain,vision,user:bob,role:responder;tok-ops=*")
    home = tmp_path / "home"
    with serve(home, {"JOBTRAIL_API_TOKENS": tokens, "JOBTRAIL_TOPOLOGY": TOPOLOGY}) as server:
        inc = _shared_incident(server.url)
        subs = {}
        for token in ("tok-llm", "tok-both"):
            made = http("POST", f"{server.url}/v1/subscriptions", {
                "name": f"hook-{token}", "owner": "team:network",
                "channel": {"kind": "webhook", "url": "https://hooks.example.com/x"}},
                token=token)
            assert made.status == 201, made.body
            subs[token] = made.body["id"]
        expires = int(clock.time()) + 3600

        def link(token: str) -> str:
            return ack_link(server.url, Secrets(home), inc, subs[token], expires)

        json = "application/json"
        for clicker in ("tok-llm", "tok-both", "tok-ops"):  # alice's link: her projects only
            refused = _call("POST", link("tok-llm"), token=clicker, accept=json)[0]
            assert refused.status == 403 and "other project" in refused.body["error"]
        assert _call("GET", link("tok-llm"), token="tok-both")[0].status == 403
        # bob's link (he holds both projects), clicked by alice (she does not): refused
        alice = _call("POST", link("tok-both"), token="tok-llm", accept=json)[0]
        assert alice.status == 403 and "alice does not hold" in alice.body["error"]
        assert http("GET", f"{server.url}/v1/incidents/{inc}", token="tok-ops") \
            .body["status"] == "open"
        done = _call("POST", link("tok-both"), token="tok-both", accept=json)[0]
        assert done.status == 200 and done.body["state"] == "done", done.body
        log = http("GET", f"{server.url}/v1/incidents/{inc}", token="tok-ops").body["log"]
        (entry,) = [e for e in log if e["kind"] == "acknowledged"]
        assert (entry["actor_kind"], entry["actor"]) == ("person", "bob")  # not team:network


# --- the command line prints text, never terminal control ----------------------------------


def test_the_cli_shows_control_characters_a_producer_wrote_and_obeys_none(
        tmp_path: Path) -> None:
    """OSC 52 (write the operator's clipboard), a screen clear, colours and a CR that
    overprints a line, in a message and an entity: printed escaped, whatever the terminal."""
    import json

    from tests.trust_kit import cli

    hostile = {"type": "job.step", "time": "2026-11-30T10:00:00Z", "cluster": "c",
               "project": "llm", "job_id": "job-esc", "attempt": 1,
               "entity": "rank-0\r\nX-Injected: 1",
               "message": "\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\x1b[31mFAKE: all clear"
                          "\x1b[0m\rline", "attributes": {"step": 1}}
    events = tmp_path / "esc.jsonl"
    events.write_text(json.dumps(hostile) + "\n")
    home = tmp_path / "home"
    cli(home, "ingest", str(events))
    for colour in ("--colour", "--no-colour"):
        out = cli(home, "timeline", "job-esc", "--project", "llm", colour).stdout
        assert "\x07" not in out and "\r" not in out and "\x1b]" not in out, repr(out)
        assert "\x1b[2J" not in out and "\x1b[31mFAKE" not in out, repr(out)
        assert "\\x1b]52;c;" in out and "\\r\\nX-Injected: 1" in out
    from jobtrail.views.terminal import printable

    assert printable("\x1b[35mscheduler\x1b[0m\tok\n") == "\x1b[35mscheduler\x1b[0m\tok\n"
    assert printable("a\rb\x1b]0;t\x07") == "a\\rb\\x1b]0;t\\x07"


# --- a Markdown export carries no raw HTML --------------------------------------------------


def test_the_markdown_export_escapes_raw_html_a_person_wrote() -> None:
    """A renderer that allows HTML (many wikis do) ran a section's `<script>` as written."""
    from markdown_it import MarkdownIt

    from jobtrail.views.postmortem import export
    from tests.story_kit import Story

    story = Story("ib-flap-64")
    story.do("draft_postmortem")
    text = ("</textarea><script>alert(5)</script> <iframe src=//evil></iframe> <!-- x -->\n\n"
            "See <https://runbooks.example/leaf> and `<b>` in code; 1 < 2.\n\n"
            "```\n<script>kept as code</script>\n```")
    inc = story.do("edit_postmortem", section="summary", text=text)
    markdown = export(inc, "md")
    rendered = MarkdownIt("commonmark").render(markdown)  # a reader that keeps raw HTML
    for tag in ("<script", "<iframe", "</textarea", "<!--"):
        assert tag not in rendered, rendered  # shown as text (&lt;...), never a tag
    assert '<a href="https://runbooks.example/leaf">' in rendered  # the autolink still links
    assert "<code>&lt;b&gt;</code>" in rendered and "1 &lt; 2" in rendered
    assert "&lt;script&gt;kept as code" in rendered  # a code block is shown as written


# --- a command id is its author's -------------------------------------------------------------


def test_another_principal_s_command_under_the_same_id_is_its_own(tmp_path: Path) -> None:
    """The probe: B re-sent A's `command_id` with another note and got 200 with no event:
    its note was dropped silently, and B could pre-claim the ids A would use."""

    from tests.test_trust import TOPOLOGY
    from tests.trust_kit import http, serve

    tokens = ("tok-llm=llm-pretrain,user:alice,role:responder;"
              "tok-vision=vision,user:bob,role:responder;tok-ops=*")
    with serve(tmp_path / "home", {"JOBTRAIL_API_TOKENS": tokens,
                                   "JOBTRAIL_TOPOLOGY": TOPOLOGY}) as server:
        url = f"{server.url}/v1/incidents/{_shared_incident(server.url)}/commands"

        def note(token: str, text: str) -> list[object]:
            sent = http("POST", url, {"command": "note", "command_id": "n1",
                                      "data": {"text": text}}, token=token)
            assert sent.status == 200, sent.body
            return list(sent.body["events"])

        assert len(note("tok-llm", "alice's note")) == 1
        assert len(note("tok-vision", "bob's note")) == 1  # not swallowed as alice's repeat
        assert note("tok-llm", "alice's note") == []  # alice's own retry is still a repeat
        log = http("GET", url.rsplit("/", 1)[0], token="tok-ops").body["log"]
        assert sorted(e["data"]["text"] for e in log if e["kind"] == "note_added") == [
            "alice's note", "bob's note"]
        for bad in ("", "x" * 201):  # scoped or not, the caller's id is 1 to 200 characters
            refused = http("POST", url, {"command": "note", "command_id": bad,
                                         "data": {"text": "x"}}, token="tok-llm")
            assert refused.status == 422 and "command_id" in refused.body["error"]


@pytest.mark.parametrize(("fmt", "body", "field"), [
    ("alertmanager", {"receiver": "r", "alerts": [{"labels": ["a", "b"]}]}, "alerts[0].labels"),
    ("alertmanager", {"receiver": "r", "commonLabels": [1], "alerts": [{"labels": {}}]},
     "commonLabels"),
    ("grafana", {"ruleName": "r", "state": "alerting", "evalMatches": [{"tags": [1]}]},
     "evalMatches[0].tags"),
])
def test_labels_that_are_not_an_object_are_a_dead_letter_naming_them(
        fmt: str, body: dict[str, object], field: str) -> None:
    """They were a TypeError caught at the top (a traceback logged per request)."""
    import json
    from datetime import UTC, datetime

    from ingest.adapters import Context, registry, run
    from schemas.dead_letters import DeadLetter

    ctx = Context(producer="t", observed_at=datetime(2026, 12, 4, tzinfo=UTC))
    (letter,) = run(registry()[fmt], json.dumps(body), ctx)
    assert isinstance(letter, DeadLetter) and letter.field == field
    assert "must be an object" in letter.reason
