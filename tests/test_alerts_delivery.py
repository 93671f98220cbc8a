"""Delivery against real receivers on loopback, the store in chDB: signed webhooks that a
consumer verifies with the `standardwebhooks` library, retries with backoff and Retry-After
under one `webhook-id`, giving up, 410 disabling the subscription, the SSRF guard, digests,
email over a real SMTP server (aiosmtpd), and no channel secret ever in the store."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobtrail.alerts.egress import NOT_DELIVERED
from jobtrail.alerts.secrets import Secrets, new_signing_secret
from jobtrail.alerts.store import AlertStore
from jobtrail.alerts.worker import Deliverer, decide_pass
from jobtrail.cli.alerts import notification_line
from jobtrail.config import Settings
from jobtrail.learn import scenarios
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.notify.model import Matcher, Subscription
from processors.pipeline import Pipeline
from tests.alerts_kit import Receiver, _verify, receiver, smtp_server

T = datetime.now(UTC).replace(microsecond=0)
"""Delivery time: the wall clock, because receivers check `webhook-timestamp` against theirs
(the library's window is 5 minutes). Reset at the start of each test (`_wall_clock`): taken
once at import, it was older than the window by the time a long suite reached these tests."""


@pytest.fixture(autouse=True)
def _wall_clock() -> None:
    global T
    T = datetime.now(UTC).replace(microsecond=0)


def _load(store: Store, *names: str) -> None:
    for name in names:
        story = scenarios.load(scenarios.LIBRARY / f"{name}.yaml")
        sink = Sink(store, Pipeline(timedelta(seconds=30), scenarios.wiring(story),
                                    rules=story.rules))
        sink.handle(story.events)


class Rig:
    def __init__(self, store: Store, home: Path, box: Receiver | None, **settings: Any) -> None:
        self.alerts = AlertStore(store)
        self.secrets = Secrets(home, env={})
        self.settings = Settings(home=home, alert_hosts=("127.0.0.1",), **settings)
        self.box = box
        self.deliverer = Deliverer(self.alerts, self.secrets, self.settings)

    def subscribe(self, name: str, kind: str = "webhook", path: str = "/hook",
                  *matchers: str, **extra: Any) -> Subscription:
        sub_id = f"sub-{name}"
        target = extra.pop("target", None)
        secret = ""
        if kind == "webhook":
            signing = new_signing_secret()
            secret = self.secrets.put(f"{sub_id}/signing", signing)
            if self.box is not None:
                self.box.secrets[path] = [signing]
        if target is None:
            assert self.box is not None
            target = self.secrets.put(f"{sub_id}/url", f"{self.box.url}{path}")
        sub = Subscription.model_validate({
            "id": sub_id, "name": name, "owner": f"team:{name}",
            "matchers": [Matcher.parse(m).model_dump() for m in matchers],
            "channel": {"kind": kind, "target": target, "secret": secret},
            "repeat_s": 0, "max_age_s": 0, "history": True, **extra})
        return self.alerts.put_subscription(sub, by="test")

    def run(self, at: datetime) -> list[Any]:
        decide_pass(self.alerts, at)
        return self.deliverer.run(at)


@pytest.fixture
def box() -> Iterator[Receiver]:
    with receiver() as b:
        yield b


def test_a_signed_webhook_is_retried_under_one_id_until_it_lands(store: Store, tmp_path: Path,
                                                                  box: Receiver) -> None:
    _load(store, "ib-flap-64")
    rig = Rig(store, tmp_path, box)
    rig.subscribe("network", "webhook", "/hook", "team=network", on=["opened"])
    box.on("/hook", (503, {}, 0), (429, {"Retry-After": "120"}, 0))
    (first,) = rig.run(T)
    assert (first.status, first.code) == ("failed", 503)
    assert first.next_at is not None
    assert timedelta(seconds=5) <= first.next_at - T < timedelta(seconds=10)
    assert rig.run(T + timedelta(seconds=2)) == []  # not yet
    (second,) = rig.run(T + timedelta(seconds=20))
    assert (second.status, second.code) == ("failed", 429)
    (retrying,) = [n for n in rig.alerts.notifications() if n["id"] == second.notification_id]
    assert (retrying["status"], retrying["state"], retrying["attempts"]) == (
        "pending", "retrying", 2)
    assert second.next_at == T + timedelta(seconds=140)  # Retry-After, over the backoff
    assert rig.run(T + timedelta(seconds=60)) == []
    (third,) = rig.run(T + timedelta(seconds=200))
    assert third.status == "sent"
    assert rig.run(T + timedelta(seconds=400)) == []  # delivered: nothing more
    # `notifications` shows it delivered, from the delivery records
    (shown,) = rig.alerts.notifications(status="delivered")
    assert shown["id"] == third.notification_id and shown["attempts"] == 3
    assert f" delivered  {shown['incident_id']}" in notification_line(shown)
    assert f"[attempt 3 at {third.at:%H:%M:%S}]" in notification_line(shown)
    unique = box.unique("/hook")
    decided = [n for n in rig.alerts.notifications() if n["status"] == "pending"]
    assert set(unique) == {n["id"] for n in decided}  # one webhook-id per notification
    assert len(box.at("/hook")) == 3
    assert all(r.verified for r in box.at("/hook"))  # every attempt signed
    tampered = box.at("/hook")[0]
    assert not _verify([new_signing_secret()], tampered.headers, tampered.body)
    assert not _verify(box.secrets["/hook"], tampered.headers, tampered.body + b" ")
    body = next(iter(unique.values())).json
    assert body["incident"]["owner"] == "network" and body["transition"] == "opened"
    rows = rig.alerts.deliveries(None, notification=body["id"])
    assert [(r["attempt"], r["status"], r["code"]) for r in sorted(
        rows, key=lambda r: r["attempt"])] == [(1, "failed", 503), (2, "failed", 429),
                                               (3, "sent", 200)]


def test_it_gives_up_after_the_bound_and_a_410_disables_the_subscription(
        store: Store, tmp_path: Path, box: Receiver) -> None:
    _load(store, "ib-flap-64", "rank-storm")
    rig = Rig(store, tmp_path, box, delivery_attempts=3)
    rig.subscribe("network", "webhook", "/down", "team=network")
    rig.subscribe("infra", "slack", "/gone", "team=training-infra")
    box.on("/down", *[(500, {}, 0)] * 20)
    box.on("/gone", (410, {}, 0))
    at = T
    for _ in range(8):
        rig.run(at)
        at += timedelta(hours=1)
    statuses = {(r["subscription_id"], r["status"]) for r in rig.alerts.deliveries(None)}
    assert ("sub-network", "gave_up") in statuses
    tries = [r for r in box.at("/down")]
    assert len(tries) == 3 * len(box.unique("/down"))  # exactly the bound, per notification
    assert len(box.at("/gone")) == 1
    found = rig.alerts.subscription("sub-infra", None)
    assert found is not None and not found[0].enabled
    assert "410 Gone" in found[0].disabled_reason


def test_a_channel_may_not_reach_inside(store: Store, tmp_path: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    _load(store, "ib-flap-64")
    rig = Rig(store, tmp_path, None)
    rig.settings = Settings(home=tmp_path)  # the default: public hosts only
    rig.deliverer = Deliverer(rig.alerts, rig.secrets, rig.settings)
    target = rig.secrets.put("inside", "http://169.254.169.254/latest/meta-data")
    rig.subscribe("network", "slack", "", "team=network", target=target)
    with caplog.at_level(logging.WARNING, logger="jobtrail.alerts"):
        attempts = rig.run(T)
    assert attempts and {a.status for a in attempts} == {"gave_up"}
    assert attempts[0].error == NOT_DELIVERED  # the subscriber reads no network detail
    assert "169.254.169.254 is not public" in caplog.text  # the operator does


def test_a_digest_is_one_message(store: Store, tmp_path: Path, box: Receiver) -> None:
    _load(store, "late-cause", "oom-red-herring", "fail-slow-storage")
    rig = Rig(store, tmp_path, box)
    rig.subscribe("morning", "slack", "/digest", mode="digest", digest_cron="0 9 * * *",
                  timezone="UTC")
    assert rig.run(datetime(2026, 11, 30, 8, 0, tzinfo=UTC)) == []  # before the tick
    attempts = rig.run(T)
    (request,) = box.at("/digest")
    assert len(attempts) >= 3 and {a.status for a in attempts} == {"sent"}
    slack = request.json
    assert slack["text"].startswith("jobtrail digest for morning:")
    assert f"{len(attempts)} change(s)" in slack["text"]


def test_email_over_a_real_smtp_server(store: Store, tmp_path: Path) -> None:
    _load(store, "ib-flap-64")
    with smtp_server() as mail:
        rig = Rig(store, tmp_path, None, smtp=f"{mail.host}:{mail.port}",
                  smtp_from="jobtrail@cluster.example", public_url="https://jt.example")
        rig.subscribe("network", "email", "", "team=network", target="net-oncall@example.com")
        attempts = rig.run(T)
        assert attempts and {a.status for a in attempts} == {"sent"}
        assert len(mail.messages) == len(attempts)
    first, second, *later = mail.messages  # opened, severity raised, then recovered
    assert [m.get_body(preferencelist=("plain",)).get_content().splitlines()[0]
            for m in later][-1].endswith("recovery verified")
    assert mail.envelopes[0] == ("jobtrail@cluster.example", ["net-oncall@example.com"])
    assert first["In-Reply-To"] == second["In-Reply-To"]  # one thread per incident
    assert len({m["Subject"] for m in mail.messages}) == 1  # and one subject
    assert first["Message-ID"] != second["Message-ID"]
    unsubscribe = first["List-Unsubscribe"]
    assert unsubscribe.startswith("<https://jt.example/v1/subscriptions/sub-network/"
                                  "unsubscribe?token=")
    plain = first.get_body(preferencelist=("plain",)).get_content()
    rich = first.get_body(preferencelist=("html",)).get_content()
    assert "Cause: network on leaf-01/p2" in plain and "Owner: network" in plain
    assert "<table>" in rich and "Unsubscribe</a>" in rich


def test_no_channel_secret_reaches_the_store(store: Store, tmp_path: Path,
                                             box: Receiver) -> None:
    _load(store, "ib-flap-64")
    rig = Rig(store, tmp_path, box)
    url = f"{box.url}/T0001/B0001/XXXXsecretpathXXXX"
    target = rig.secrets.put("slack-url", url)
    rig.subscribe("network", "slack", "", "team=network", target=target)
    rig.subscribe("hooks", "webhook", "/hook", "team=network")
    rig.run(T)
    assert box.at("/T0001/B0001/XXXXsecretpathXXXX")  # it was used
    signing = rig.secrets.get("secret:sub-hooks/signing")
    dump = ""
    for table in ("subscriptions", "notifications", "deliveries"):
        dump += str(store.client.query(f"SELECT * FROM {table}").result_rows)
    assert "XXXXsecretpathXXXX" not in dump and signing not in dump
    assert (tmp_path / "secrets.json").stat().st_mode & 0o777 == 0o600


def test_an_incremental_pass_decides_what_a_full_pass_does(store: Store, tmp_path: Path,
                                                           box: Receiver) -> None:
    from processors.incidents.model import Actor, Command

    story = scenarios.load(scenarios.LIBRARY / "ib-flap-64.yaml")
    sink = Sink(store, Pipeline(timedelta(seconds=30), scenarios.wiring(story),
                                rules=story.rules))
    sink.handle(story.events)
    rig = Rig(store, tmp_path, box)
    rig.subscribe("network", "slack", "/chat", "team=network",
                  on=["opened", "severity_raised", "resolved"])
    assert decide_pass(rig.alerts, T)[1] > 0
    before = datetime.now(UTC) - timedelta(seconds=1)
    (inc,) = store.incidents(None)
    sink.command(Command(command_id="r1", incident_id=inc["incident_id"], command="resolve",
                         actor=Actor(kind="person", name="ic-ana"),
                         time=story.events[-1].time + timedelta(minutes=5)))
    _, written = decide_pass(rig.alerts, T, since=before)
    assert written == 1  # the resolve, nothing else rewritten
    assert decide_pass(rig.alerts, T)[1] == 0  # a full pass agrees: nothing to change
    assert [n["transition"] for n in rig.alerts.notifications()] == [
        "opened", "severity_raised", "resolved"]
