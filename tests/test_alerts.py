"""Notification decisions, a pure function of the incident logs: one message per
subscription, incident and transition; the first one waits and folds; flaps are damped;
unacknowledged sev1s are repeated; silences, joined symptoms, rate limits, quiet hours (across
midnight and a DST change) and digests; every suppression logged with its reason; replays
and batchings decide the same. The channels' shapes are checked here too."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from processors.notify import channels
from processors.notify.decide import decide
from processors.notify.message import Links, message, text
from processors.notify.model import Decision, Matcher, Silence, Subscription
from processors.notify.schedule import quiet_until
from tests.story_kit import Story

LATER = datetime(2026, 12, 1, tzinfo=UTC)


def sub(name: str, *matchers: str, **extra: Any) -> Subscription:
    spec: dict[str, Any] = {
        "id": f"sub-{name}", "name": name, "owner": f"team:{name}",
        "matchers": [Matcher.parse(m).model_dump() for m in matchers],
        "channel": {"kind": "webhook", "target": "env:HOOK"}, **extra}
    return Subscription.model_validate(spec)


def sent(decisions: list[Decision], subscription: str = "") -> list[Decision]:
    return [d for d in decisions if d.status == "pending"
            and (not subscription or d.subscription_id == subscription)]


def test_matchers_follow_alertmanager() -> None:
    labels = {"team": ("network",), "severity": ("sev2",), "project": ("a", "b"),
              "class": ("network",)}
    assert Matcher.parse("team=network").matches(labels)
    assert Matcher.parse('team="network"').matches(labels)
    assert not Matcher.parse("team!=network").matches(labels)
    assert Matcher.parse("severity=~sev[12]").matches(labels)
    assert not Matcher.parse("severity=~sev").matches(labels)  # anchored: the whole value
    assert Matcher.parse("project=b").matches(labels)  # any of several values
    assert not Matcher.parse("project!~a|b").matches(labels)
    assert Matcher.parse("entity=").matches(labels)  # a missing label is ''
    assert Matcher.parse("owner=network").matches(labels)  # owner is the team
    for bad, field in (("nonsense", "label=value"), ("colour=red", "label must be one of"),
                       ("class=~(", "not a regular expression")):
        with pytest.raises(ValueError, match=field):
            Matcher.parse(bad)


def test_a_64_rank_storm_is_one_message_per_team() -> None:
    storm = Story("rank-storm")
    fabric = Story("ib-flap-64")
    logs = {**storm.logs(), **fabric.logs()}
    subs = [sub("training-infra", "team=training-infra", repeat_s=0),
            sub("network", "team=network", repeat_s=0), sub("storage", "team=storage")]
    decisions = decide(subs, [], logs, LATER)
    infra = sent(decisions, "sub-training-infra")
    assert [(d.incident_id, d.transition) for d in infra] == [
        (storm.main.id, "opened")]  # 64 NCCL timeouts, one incident, one message
    assert infra[0].folded == ("severity_raised",)
    network = sent(decisions, "sub-network")
    # and, by default, the "recovered" message once the job passed its failure point
    assert [d.transition for d in network] == ["opened", "severity_raised",
                                               "recovery_verified"]
    assert {d.incident_id for d in network} == {fabric.main.id}
    assert sent(decisions, "sub-storage") == []
    # every folded transition is logged as a suppression that names the first message
    folded = [d for d in decisions if d.reason.startswith("folded into")]
    assert folded and all(d.status == "suppressed" for d in folded)


def test_the_first_message_waits_and_goes_to_whoever_owns_it_then() -> None:
    story = Story("late-cause")  # NCCL errors first (training-infra), the port-down after
    decisions = decide([sub("training-infra", "team=training-infra"),
                        sub("network", "team=network")], [], story.logs(), LATER)
    assert sent(decisions, "sub-training-infra") == []  # it was not theirs once settled
    (first,) = sent(decisions, "sub-network")
    assert first.transition == "opened" and first.key == "first"
    assert first.not_before == story.main.opened_at + timedelta(seconds=30)
    assert "owner_changed" in first.folded
    # a longer wait is a longer fold; no wait sends the cause change separately
    eager = decide([sub("ops", wait_s=0)], [], story.logs(), LATER)
    assert len(sent(eager)) > len(sent(decide([sub("ops")], [], story.logs(), LATER)))


def test_decisions_are_a_pure_function_of_the_log() -> None:
    subs = [sub("network", "team=network"), sub("all"), sub("sev1", "severity=sev1")]
    one = decide(subs, [], Story("ib-flap-64", batch=1).logs(), LATER)
    nine = decide(subs, [], Story("ib-flap-64", batch=9).logs(), LATER)
    assert one == nine
    assert decide(subs, [], Story("ib-flap-64").logs(), LATER) == one  # and on replay
    assert len({d.id for d in one}) == len(one)


def test_a_flap_is_damped_and_a_real_reopen_is_held_then_sent() -> None:
    story = Story("ib-flap-64")
    t = story.clock
    story.do("resolve", at=t)
    story.do("reopen", at=t + timedelta(minutes=2), why="flapped again")
    story.do("resolve", at=t + timedelta(minutes=4))
    subscriber = sub("network", "team=network", on=["opened", "resolved", "reopened"])
    decisions = decide([subscriber], [], story.logs(), LATER)
    by_kind = [(d.transition, d.status, d.reason) for d in decisions
               if d.transition in ("resolved", "reopened")]
    assert by_kind == [("resolved", "pending", ""),
                       ("reopened", "suppressed",
                        "flap damped: resolved again within 600 s of reopening"),
                       ("resolved", "suppressed",
                        "flap damped: the reopen it ends was not sent")]
    # reopened and still open after the hold: sent, at the end of the hold
    story.do("reopen", at=t + timedelta(minutes=6), why="down again")
    held = [d for d in decide([subscriber], [], story.logs(), LATER)
            if d.transition == "reopened" and d.status == "pending"]
    assert len(held) == 1
    assert held[0].not_before == t + timedelta(minutes=6, seconds=600)


def test_an_unacknowledged_sev1_repeats_until_someone_acknowledges() -> None:
    story = Story("rank-storm")
    first_at = story.main.opened_at + timedelta(seconds=30)
    subscriber = sub("training-infra", "team=training-infra", repeat_s=600, max_repeats=6)
    at = first_at + timedelta(minutes=25)  # reminders 1 and 2 were due: only 2 is sent
    # reminders go to the owning team only: a watcher's subscription gets none
    watcher = sub("watchers", "team=training-infra", repeat_s=600, max_repeats=6)
    assert not [d for d in decide([watcher], [], story.logs(), at)
                if d.key.startswith("repeat")]
    reminders = [d for d in decide([subscriber], [], story.logs(), at) if d.key.startswith(
        "repeat")]
    assert [(d.key, d.status) for d in reminders] == [("repeat-1", "suppressed"),
                                                      ("repeat-2", "pending")]
    assert reminders[0].reason == "superseded by reminder 2"
    story.do("ack", at=first_at + timedelta(minutes=15))
    acked = [d for d in decide([subscriber], [], story.logs(), at + timedelta(minutes=20))
             if d.key.startswith("repeat")]
    assert [(d.key, d.status) for d in acked] == [("repeat-1", "pending")]
    assert acked[0].not_before == first_at + timedelta(minutes=10)
    # a sev3 never repeats
    quiet = decide([sub("net", "team=network", repeat_s=60)], [], Story("late-cause").logs(),
                   LATER)
    assert not [d for d in quiet if d.key.startswith("repeat")]


def test_silences_joined_symptoms_and_the_rate_limit_are_logged() -> None:
    logs = {**Story("ib-flap-64").logs(), **Story("rank-storm").logs(),
            **Story("enospc-then-gpu-crash").logs()}
    everyone = sub("all", repeat_s=0)
    silence = Silence(id="sil-1", matchers=(Matcher.parse("class=nccl_hang"),),
                      starts=datetime(2026, 11, 1, tzinfo=UTC),
                      ends=datetime(2026, 12, 31, tzinfo=UTC), reason="NCCL upgrade week",
                      all_projects=True)
    decisions = decide([everyone], [silence], logs, LATER)
    silenced = [d for d in decisions if d.reason.startswith("silenced")]
    assert silenced and {d.labels["class"] for d in silenced} == {("nccl_hang",)}
    assert silenced[0].reason == "silenced by sil-1: NCCL upgrade week"
    expired = silence.model_copy(update={"ends": datetime(2026, 11, 2, tzinfo=UTC)})
    assert not [d for d in decide([everyone], [expired], logs, LATER)
                if d.reason.startswith("silenced")]
    limited = decide([sub("all", repeat_s=0, rate_limit={"count": 2, "per_s": 86400})], [],
                     logs, LATER)
    assert len(sent(limited)) == 2
    over = [d for d in limited if d.reason.startswith("rate limit")]
    assert over and over[0].reason == "rate limit: 2 per 86400 s"


def test_quiet_hours_cross_midnight_and_a_dst_change() -> None:
    berlin = sub("night", quiet={"start": "22:00", "end": "07:00"}, timezone="Europe/Berlin")
    assert berlin.quiet is not None
    zone = ZoneInfo("Europe/Berlin")
    # the night clocks go forward (2026-03-29 02:00 -> 03:00): 07:00 is 05:00 UTC, not 06:00
    at = datetime(2026, 3, 28, 23, 30, tzinfo=zone).astimezone(UTC)
    assert quiet_until(berlin, berlin.quiet, at) == datetime(2026, 3, 29, 5, 0, tzinfo=UTC)
    # after midnight, in the window that began yesterday
    early = datetime(2026, 6, 2, 3, 0, tzinfo=zone).astimezone(UTC)
    assert quiet_until(berlin, berlin.quiet, early) == datetime(2026, 6, 2, 5, 0, tzinfo=UTC)
    # the night clocks go back (2026-10-25): 07:00 is 06:00 UTC
    autumn = datetime(2026, 10, 24, 22, 30, tzinfo=zone).astimezone(UTC)
    assert quiet_until(berlin, berlin.quiet, autumn) == datetime(2026, 10, 25, 6, 0,
                                                                 tzinfo=UTC)
    noon = datetime(2026, 6, 2, 12, 0, tzinfo=zone).astimezone(UTC)
    assert quiet_until(berlin, berlin.quiet, noon) is None
    # through decide: the sev3 waits for the morning, the sev1 bypasses
    story = Story("late-cause")  # 09:20 UTC is 10:20 in Berlin: make the night there
    night = sub("n", "team=network", quiet={"start": "10:00", "end": "11:30"},
                timezone="Europe/Berlin")
    (held,) = sent(decide([night], [], story.logs(), LATER))
    assert held.not_before == datetime(2026, 11, 30, 10, 30, tzinfo=UTC)
    assert "quiet hours until 11:30 CET" in held.reason
    urgent = sub("u", "team=training-infra", quiet={"start": "09:00", "end": "12:00"},
                 timezone="UTC", repeat_s=0)
    (now,) = sent(decide([urgent], [], Story("rank-storm").logs(), LATER))
    assert now.severity == "sev1" and now.not_before.hour == 9 and now.not_before.minute == 10


def test_a_digest_collects_into_the_next_tick_in_the_subscribers_zone() -> None:
    digest = sub("morning", mode="digest", digest_cron="0 9 * * *",
                 timezone="America/New_York", repeat_s=0)
    decisions = sent(decide([digest], [], {**Story("late-cause").logs(),
                                            **Story("oom-red-herring").logs()}, LATER))
    assert len(decisions) >= 2
    ticks = {d.digest_key for d in decisions}
    assert ticks == {"2026-11-30T14:00:00+00:00"}  # 09:00 EST
    with pytest.raises(ValueError, match="digest_cron"):
        sub("bad", mode="digest", digest_cron="every morning")


def test_a_backfill_of_old_history_pages_nobody() -> None:
    story = Story("late-cause")
    story.do("note", at=story.clock + timedelta(days=3), text="a much later note")
    (d,) = [d for d in decide([sub("network", "team=network")], [], story.logs(), LATER)
            if d.key == "first"]
    assert d.status == "suppressed" and d.reason.startswith("stale:")
    kept = decide([sub("network", "team=network", max_age_s=0)], [], story.logs(), LATER)
    assert [d.status for d in kept if d.key == "first"] == ["pending"]


def test_an_incident_over_before_it_was_seen_pages_nobody_unless_asked() -> None:
    """ib-flap-64 recovered at 10:40 (event time). Seen live (its log recorded as it
    happened), every transition is sent; first seen a week later (a backfill), none is,
    each saying why; a subscription with `history` still gets them."""
    story = Story("ib-flap-64")
    inc = story.main.id
    live = {inc: story.log[0].time}
    week = {inc: story.log[-1].time + timedelta(days=7)}
    net = sub("network", "team=network")
    assert sent(decide([net], [], story.logs(), LATER, seen=live))
    backfill = [d for d in decide([net], [], story.logs(), LATER, seen=week)
                if d.incident_id == inc]
    assert backfill and not sent(backfill)
    assert {d.reason for d in backfill if d.reason.startswith("history:")} == {
        "history: over at 2026-11-30 10:40 UTC, before jobtrail saw it at 2026-12-07 10:40 "
        "UTC (a backfill); a subscription with history pages it"}
    asked = sub("network", "team=network", history=True)
    assert [d.id for d in sent(decide([asked], [], story.logs(), LATER, seen=week))] == [
        d.id for d in sent(decide([net], [], story.logs(), LATER, seen=live))]


def test_a_subscription_sees_only_its_projects() -> None:
    story = Story("leaf-breaks-five-jobs")
    projects = story.main.projects
    assert len(projects) >= 1
    mine, other = projects[0], "vision-nobody-runs"
    bound = sub("mine", projects=[mine], repeat_s=0)
    elsewhere = sub("elsewhere", projects=[other], repeat_s=0)
    decisions = decide([bound, elsewhere], [], story.logs(), LATER)
    assert sent(decisions, "sub-elsewhere") == []
    (d,) = sent(decisions, "sub-mine")[:1]
    msg = message(bound, d, story.log)
    assert all(job.startswith(f"{mine}/") for job in msg["incident"]["jobs"])


def _msg(name: str = "ib-flap-64") -> dict[str, Any]:
    story = Story(name)
    subscriber = sub("network", "team=network")
    (d, *_) = sent(decide([subscriber], [], story.logs(), LATER))
    return message(subscriber, d, story.log, Links("https://jt.example", "https://gf.example"))


def test_messages_carry_cause_owner_impact_recovery_and_links() -> None:
    msg = _msg()
    inc = msg["incident"]
    assert msg["type"] == "incident.first" and msg["transition"] == "opened"
    assert inc["cause"]["entity"] == "leaf-01/p2" and inc["owner"] == "network"
    assert msg["links"]["incident"] == ("https://gf.example/d/jobtrail-incident?"
                                        f"var-incident={inc['id']}")
    assert msg["links"]["api"] == f"https://jt.example/v1/incidents/{inc['id']}"
    body = text(msg)
    for part in ("Cause: network on leaf-01/p2", "Owner: network", "Impact:", "Recovery:",
                 "Incident: https://gf.example/"):
        assert part in body
    # the severity-raised message, later, has the job's impact and its timeline link
    story = Story("ib-flap-64")
    subscriber = sub("network", "team=network")
    raised = next(d for d in decide([subscriber], [], story.logs(), LATER)
                  if d.transition == "severity_raised")
    later = message(subscriber, raised, story.log, Links())
    assert later["incident"]["impact"]["gpus"] == 512
    assert "var-project=llm-pretrain&var-job=pretrain&var-attempt=1&from=" in \
        later["links"]["timeline"]


def test_channel_shapes() -> None:
    msg = _msg()
    msg["incident"]["cause"]["explanation"] = "<script>x</script> & <https://evil|click>"
    slack = channels.slack(msg)
    assert set(slack) == {"text", "blocks", "attachments"} and slack["text"]
    blocks = [*slack["blocks"], *slack["attachments"][0]["blocks"]]
    kinds = [b["type"] for b in blocks]
    assert kinds == ["header", "section", "section", "section", "section", "actions",
                     "context"]
    assert slack["blocks"][0]["text"]["type"] == "plain_text"
    assert len(slack["blocks"][0]["text"]["text"]) <= 150
    assert "&lt;https://evil|click&gt;" in blocks[3]["text"]["text"]  # no link
    assert len(blocks[2]["fields"]) <= 10
    assert all(e["type"] == "button" and e["url"].startswith("https://")
               for e in blocks[5]["elements"])
    mm = channels.mattermost(msg)
    assert mm["text"] and mm["attachments"][0]["fields"]
    assert mm["attachments"][0]["title_link"] == msg["links"]["incident"]
    teams = channels.teams(msg)
    (attachment,) = teams["attachments"]
    assert teams["type"] == "message"
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert [b["type"] for b in card["body"]][:4] == ["Container", "TextBlock", "FactSet",
                                                     "TextBlock"]
    assert all(a["type"] == "Action.OpenUrl" for a in card["actions"])
    mail = channels.email(msg, to="net@example.com", sender="jobtrail@example.com",
                          unsubscribe="https://jt.example/u?token=t", at=LATER)
    assert mail["In-Reply-To"] == f"<{msg['incident']['id']}@example.com>"
    assert mail["List-Unsubscribe"] == "<https://jt.example/u?token=t>"
    assert mail["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    plain, rich = (p.get_content() for p in mail.iter_parts())
    assert "Cause: network on leaf-01/p2" in plain
    assert "&lt;script&gt;" in rich and "<script>" not in rich
    body = channels.render("webhook", msg)
    assert json.loads(body)["id"] == msg["id"]
    headers = channels.sign(msg["id"], LATER, body, ["whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                                                     "whsec_" + "bXlzZWNyZXRrZXkxMjM0NTY3ODk="])
    assert headers["webhook-id"] == msg["id"]
    assert len(headers["webhook-signature"].split()) == 2  # both while the secret rotates


def test_a_job_symptom_joined_to_a_notified_infra_incident_is_muted() -> None:
    from processors.incidents.model import Actor, IncidentEvent, apply, new_event
    from schemas import incident_events as ev

    detector = Actor(kind="processor", name="detector", rule="test")
    t0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

    def story(incident: str, steps: list[tuple[int, Any]]) -> list[IncidentEvent]:
        state, out = None, []
        for n, (minute, payload) in enumerate(steps):
            event = new_event(state, incident, payload, t0 + timedelta(minutes=minute),
                              detector, f"{incident}-{n}")
            state = apply(state, event)
            out.append(event)
        return out

    infra = story("inc-port", [
        (0, ev.IncidentOpened.model_validate({"key": "entity:leaf-01/p2", "class": "network",
                                              "entity": "leaf-01/p2"})),
        (0, ev.OwnerAssigned(team="network", rule="network"))])
    symptom = story("inc-job", [
        (5, ev.IncidentOpened.model_validate({"key": "job:p/j/1", "class": "nccl_hang",
                                              "entity": "p/j/1"})),
        (5, ev.OwnerAssigned(team="training-infra", rule="nccl_hang")),
        (5, ev.CauseUpdated.model_validate({"class": "network", "entity": "leaf-01/p2",
                                            "source": "infrastructure"}))])
    decisions = decide([sub("ops", repeat_s=0)], [], {"inc-port": infra, "inc-job": symptom},
                       LATER)
    (muted,) = [d for d in decisions if d.incident_id == "inc-job" and d.key == "first"]
    assert muted.status == "suppressed" and muted.reason == "joined inc-port, already notified"
    assert [d.incident_id for d in sent(decisions)] == ["inc-port"]


def test_postmortem_due_and_overdue_followups_are_told_once_their_date_passes() -> None:
    story = Story("ib-flap-64")
    story.do("add_action", title="Replace the optics", owner="network", due="2026-12-01")
    story.do("resolve")
    watch = sub("network", "team=network", on=["postmortem_due", "followup_overdue"],
                max_age_s=0)
    early = decide([watch], [], story.logs(), datetime(2026, 12, 2, 12, tzinfo=UTC))
    assert [(d.transition, d.reason) for d in sent(early)] == [
        ("followup_overdue", "due 2026-12-01")]
    later = decide([watch], [], story.logs(), datetime(2026, 12, 10, tzinfo=UTC))
    assert sorted(d.transition for d in sent(later)) == ["followup_overdue", "postmortem_due"]
    assert len({d.id for d in later}) == 2  # the same ids on every later pass
    (action,) = [a for a in story.main.actions.values() if a.title == "Replace the optics"]
    story.do("update_action", action_id=action.action_id, status="done")
    assert [d.transition for d in sent(decide([watch], [], story.logs(),
                                             datetime(2026, 12, 10, tzinfo=UTC)))] == [
        "postmortem_due"]
