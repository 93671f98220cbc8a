"""Messages a person can act on, per channel, checked against golden files: what broke in
words, which jobs and how many GPUs, who owns it and why, the proposed actions with their
commands, what is at risk before the loss is assessed (never "0.0 GPU-h lost"), recovery in
words, links that open the job timeline at the incident's time range and attempt; the
"recovered" message by default; once acknowledged, who did and when, and no acknowledge
link; one email subject per incident thread.

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
    story.do("resolve", by="ic-ana")
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


def _render(kind: str, msg: dict[str, Any]) -> str:
    if kind == "email":
        mail = channels.email(msg, to="net-oncall@example.com", sender="jobtrail@cluster.example",
                              unsubscribe="https://jobtrail.example/unsubscribe",
                              at=datetime.fromisoformat(msg["time"]))
        return "".join(f"{k}: {v}\n" for k, v in mail.items() if k not in (
            "Content-Type", "MIME-Version")) + "\n" + text(msg) + "\n"
    return json.dumps(json.loads(channels.render(kind, msg)), indent=2, sort_keys=True,
                      ensure_ascii=False) + "\n"


@pytest.mark.parametrize("kind", ["webhook", "slack", "teams", "email"])
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
    buttons = [e["text"]["text"] for b in channels.slack(msgs["storm"])["blocks"]
               if b["type"] == "actions" for e in b["elements"]]
    assert buttons[0] == "Acknowledge"
    assert channels.teams(msgs["storm"])["attachments"][0]["content"]["actions"][0][
        "title"] == "Acknowledge"
    # before the loss is assessed: what is at risk, never "0.0 GPU-hours lost"
    severity = text(msgs["severity"])
    assert "0.0 GPU-hours lost" not in severity and "0.0 GPU-h" not in json.dumps(
        channels.slack(msgs["severity"]))
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
    slack = channels.slack(msg)
    assert "Acknowledge" not in [e["text"]["text"] for b in slack["blocks"]
                                 if b["type"] == "actions" for e in b["elements"]]
    fields = [f["text"] for b in slack["blocks"] for f in b.get("fields", [])]
    assert any(f.startswith("*Acknowledged*\nby ic-ana at ") for f in fields)
    teams = channels.teams(msg)["attachments"][0]["content"]
    assert "Acknowledge" not in [a["title"] for a in teams["actions"]]
    assert {"title": "Acknowledged", "value": body.split("Acknowledged: ")[1].split(
        "\n")[0]} in teams["body"][2]["facts"]


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
