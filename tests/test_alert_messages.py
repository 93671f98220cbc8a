"""Messages a person can act on, per channel, checked against golden files: what broke in
words, which jobs and how many GPUs (in the phone's push line too), who owns it and why, the
event time and its age, the proposed actions with their commands, what is at risk before
the loss is assessed (never "0.0 GPU-h lost"), recovery in words, links that open the job
timeline at the incident's time range and attempt; the "recovered" message by default; once
acknowledged, who did and when, and no acknowledge link; the resolved message looks
resolved (green) and says who resolved it and how; one email subject per incident thread.

Regenerate after a deliberate change with
`JOBTRAIL_REGEN_GOLDEN=1 pytest tests/test_alert_messages.py` and read the diff.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from processors.notify import channels
from processors.notify.decide import decide
from processors.notify.message import Links, message, text
from processors.notify.model import Decision, Matcher, Subscription
from tests.story_kit import Story

GOLDEN = Path(__file__).parent / "golden" / "alerts"
LATER = datetime(2026, 12, 1, tzinfo=UTC)
LINKS = Links("https://jobtrail.example", "https://grafana.example")
CASES = {"storm": "opened", "severity": "severity_raised", "recovery": "recovery_verified"}


def _sub() -> Subscription:
    return Subscription.model_validate({
        "id": "sub-fabric", "name": "fabric", "owner": "team:network",
        "matchers": [Matcher.parse("team=network").model_dump()],
        "channel": {"kind": "webhook", "target": "env:HOOK"}})


def _messages() -> dict[str, dict[str, Any]]:
    story = Story("ib-flap-64")
    sub = _sub()
    decisions: list[Decision] = [d for d in decide([sub], [], story.logs(), LATER)
                                 if d.status == "pending"]
    out = {}
    for case, transition in CASES.items():
        d = next(x for x in decisions if (x.transition == transition))
        out[case] = message(sub, d, story.log, LINKS)
    # the deliverer adds the signed acknowledge link while the incident is open
    # (tests/test_ack_link.py follows one over HTTP): here, a fixed one
    for case in ("storm", "severity"):
        out[case]["links"]["ack"] = (f"https://jobtrail.example/v1/incidents/"
                                     f"{out[case]['incident']['id']}/ack?sub=sub-fabric"
                                     "&expires=1796119260&token=0123456789abcdef")
    # acknowledged: the commander acknowledges, then resolves; the resolution's message
    # says who acknowledged and when, and carries no acknowledge link or button
    story.do("ack", by="ic-ana")
    story.do("resolve", by="ic-ana", text="replaced the cable at leaf-01/p2")
    d = next(x for x in decide([sub], [], story.logs(), LATER)
             if x.status == "pending" and x.transition == "resolved")
    out["acknowledged"] = message(sub, d, story.log, LINKS)
    return out


def _golden(name: str, body: str) -> None:
    path = GOLDEN / name
    if os.environ.get("JOBTRAIL_REGEN_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    assert path.exists(), f"no golden {path}: regenerate with JOBTRAIL_REGEN_GOLDEN=1"
    assert body == path.read_text(), f"{name} differs from its golden file"


def _slack_blocks(msg: dict[str, Any]) -> list[dict[str, Any]]:
    """Every block of the Slack message: the top-level ones and its attachment's."""
    shaped = channels.slack(msg)
    return [*shaped["blocks"], *(b for a in shaped["attachments"] for b in a["blocks"])]


def _render(kind: str, msg: dict[str, Any]) -> str:
    if kind == "email":
        mail = channels.email(msg, to="net-oncall@example.com", sender="jobtrail@cluster.example",
                              unsubscribe="https://jobtrail.example/unsubscribe",
                              at=datetime.fromisoformat(msg["time"]))
        return "".join(f"{k}: {v}\n" for k, v in mail.items() if k not in (
            "Content-Type", "MIME-Version")) + "\n" + text(msg) + "\n"
    return json.dumps(json.loads(channels.render(kind, msg)), indent=2, sort_keys=True,
                      ensure_ascii=False) + "\n"


@pytest.mark.parametrize("kind", ["webhook", "slack", "teams", "mattermost", "email"])
def test_every_channel_matches_its_golden_messages(kind: str) -> None:
    for case, msg in _messages().items():
        ext = "eml" if kind == "email" else "json"
        _golden(f"{kind}-{case}.{ext}", _render(kind, msg))


def test_a_message_says_what_broke_who_owns_it_and_what_to_do() -> None:
    msgs = _messages()
    storm = msgs["storm"]["incident"]
    body = text(msgs["storm"])
    assert body.splitlines()[1].startswith("What happened: On 2026-11-30 at 10:00 leaf-01/p2 "
                                           "began to flap")
    assert "Owner: network (switch ports, links and NICs belong to the network team)" in body
    assert storm["ack_command"] == f"jobtrail incident ack {storm['id']}"
    assert f"Acknowledge: https://jobtrail.example/v1/incidents/{storm['id']}/ack?" in body
    buttons = [e["text"]["text"] for b in _slack_blocks(msgs["storm"])
               if b["type"] == "actions" for e in b["elements"]]
    assert buttons[0] == "Acknowledge"
    assert channels.teams(msgs["storm"])["attachments"][0]["content"]["actions"][0][
        "title"] == "Acknowledge"
    # before the loss is assessed: what is at risk, never "0.0 GPU-hours lost"
    severity = text(msgs["severity"])
    assert "0.0 GPU-hours lost" not in severity and "0.0 GPU-h" not in json.dumps(
        channels.slack(msgs["severity"])) and "0.0 GPU-h" not in msgs["severity"]["push"]
    assert "at risk 179.2 GPU-hours (GPUs x time since the last checkpoint" in severity
    assert "Recovery: waiting for the job to be restarted" in severity
    # the recovery: in words, the loss assessed
    recovered = text(msgs["recovery"])
    assert "Recovery: recovered: progress passed the failure point" in recovered
    assert "298.67 GPU-hours lost" in recovered
    assert "Proposed: " in recovered and "jobtrail incident action-accept" in recovered
    # the timeline opens at the attempt and the incident's time range
    link = msgs["severity"]["links"]["timeline"]
    assert "&var-attempt=1&from=" in link and "&to=" in link
    start = int(link.split("from=")[1].split("&")[0]) / 1000
    assert datetime.fromtimestamp(start, UTC) == datetime(2026, 11, 30, 9, 45, tzinfo=UTC)


def test_an_acknowledged_message_says_who_acknowledged_and_offers_no_ack() -> None:
    msg = _messages()["acknowledged"]
    assert msg["incident"]["acknowledged_by"] == "ic-ana"
    body = text(msg)
    assert "Acknowledged: by ic-ana at 20" in body and "Acknowledge:" not in body
    blocks = _slack_blocks(msg)
    assert "Acknowledge" not in [e["text"]["text"] for b in blocks
                                 if b["type"] == "actions" for e in b["elements"]]
    fields = [f["text"] for b in blocks for f in b.get("fields", [])]
    assert any(f.startswith("*Resolved*\nby ic-ana at ") for f in fields)
    teams = channels.teams(msg)["attachments"][0]["content"]
    assert "Acknowledge" not in [a["title"] for a in teams["actions"]]
    assert "Acknowledge:" not in json.dumps(teams)


def test_an_email_thread_keeps_one_subject() -> None:
    subjects = {_render("email", m).splitlines()[0] for m in _messages().values()}
    assert subjects == {"Subject: [jobtrail] network on leaf-01/p2 in cluster-a "
                        "(inc-f4b69853dc651eeb)"}


def test_reminders_stop_once_the_job_has_recovered() -> None:
    """rank-storm is a sev1 nobody acknowledges; once its job passes the failure point the
    reminders stop (the log gains the recovery as the detector would write it)."""
    from datetime import timedelta

    from processors.incidents.model import Actor, new_event
    from schemas.incident_events import JobRef, RecoveryVerified

    story = Story("rank-storm")
    inc = story.main
    owner = Subscription.model_validate({
        **_sub().model_dump(), "owner": f"team:{inc.owner}", "repeat_s": 600,
        "max_repeats": 6, "matchers": [Matcher.parse(f"team={inc.owner}").model_dump()]})
    first = next(d for d in decide([owner], [], story.logs(), LATER) if d.key == "first")
    at = first.not_before + timedelta(minutes=65)

    def reminders() -> list[Decision]:
        return [d for d in decide([owner], [], story.logs(), at) if d.key.startswith("repeat")]
    assert [d.key for d in reminders()][-1] == "repeat-6"
    job = next(j for j in inc.jobs.values() if j.role == "failed")
    recovered = first.not_before + timedelta(minutes=25)
    story.log.append(new_event(inc, inc.id, RecoveryVerified(
        job=JobRef(project=job.project, job_id=job.job_id, attempt=job.attempt),
        verified_at=recovered), recovered, Actor(kind="processor", name="detector"), "test"))
    after = reminders()
    assert [d.key for d in after] == ["repeat-1", "repeat-2"]
    assert all(d.not_before <= recovered for d in after)


def test_the_push_line_says_a_512_gpu_job_died_and_the_resolution_says_how() -> None:
    msgs = _messages()
    severity = msgs["severity"]
    assert severity["push"] == (
        "[sev1] network on leaf-01/p2 in cluster-a: severity raised to sev1 (sev1 from impact: "
        "512 GPUs >= 512) — job llm-pretrain/pretrain (512 GPUs) failed at 10:11, 179.2 GPU-h "
        "at risk")
    slack = channels.slack(severity)
    assert slack["text"] == severity["push"].replace(">", "&gt;")
    assert slack["attachments"][0]["color"] == "#d32f2f"
    teams = channels.teams(severity)
    assert teams["summary"] == severity["push"]
    assert "512 GPUs) failed at 10:11" in teams["attachments"][0]["content"]["fallbackText"]
    mattermost = channels.mattermost(severity)
    assert "512 GPUs" in mattermost["text"] and "failed at 10:11" in mattermost["text"]
    assert "When: 2026-11-30 10:11 UTC (just now)" in text(severity)
    assert "Jobs: llm-pretrain/pretrain attempt 1: 512 GPUs, failed at 10:11 (step 1200)" \
        in text(severity)
    # the resolved message: who, how, green, no acknowledge, nothing to acknowledge
    done = msgs["acknowledged"]
    assert done["headline"] == "[sev1] network on leaf-01/p2 in cluster-a: resolved by ic-ana"
    assert done["incident"]["resolution"] == "replaced the cable at leaf-01/p2"
    assert done["push"].endswith("resolved by ic-ana — replaced the cable at leaf-01/p2")
    assert "Resolved: by ic-ana at 2026-11-30 10:47 UTC: replaced the cable at leaf-01/p2" \
        in text(done)
    assert channels.slack(done)["attachments"][0]["color"] == "#2e7d32"
    assert channels.mattermost(done)["attachments"][0]["color"] == "#2e7d32"
    card = channels.teams(done)["attachments"][0]["content"]
    assert card["body"][0]["style"] == "good"
    assert {"title": "Resolved", "value": "by ic-ana at 2026-11-30 10:47 UTC: replaced the "
            "cable at leaf-01/p2"} in card["body"][2]["facts"]
    opened = channels.slack(msgs["storm"])
    assert opened["attachments"][0]["color"] != channels.slack(done)["attachments"][0]["color"]
    assert "Acknowledge" not in json.dumps(channels.slack(done))


def test_a_message_says_the_event_time_and_age_of_a_backfill() -> None:
    """The same decision made a week after the event, for an incident first seen then."""
    from datetime import timedelta

    story = Story("ib-flap-64")
    sub = _sub()
    d = next(x for x in decide([sub], [], story.logs(), LATER)
             if x.status == "pending" and x.transition == "severity_raised")
    week = d.time + timedelta(days=7)
    msg = message(sub, d, story.log, LINKS, now=week, seen=week - timedelta(minutes=1))
    assert msg["age_s"] == 7 * 86400
    assert ("When: 2026-11-30 10:11 UTC (7 days ago); from events jobtrail first saw at "
            "2026-12-07 10:10 UTC") in text(msg)
    assert msg["push"].endswith("(happened 7 days ago)")
