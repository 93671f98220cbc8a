"""What a subscribing team runs, as real processes: `jobtrail subscribe`, then the sample
scenario delivers to a signed webhook, a Slack-shaped receiver and a real SMTP server; a
SIGKILL of the delivery worker mid-send is at-least-once under the same `webhook-id`; the HTTP
API is bound to the token's projects."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from jobtrail.learn import sample
from tests.alerts_kit import receiver, smtp_server
from tests.trust_kit import JOBTRAIL, ROOT, _env, cli, http, serve

TOPOLOGY = str(ROOT / "examples" / "topology-64.yaml")
TOKENS = "tok-llm=llm-pretrain;tok-vision=vision;tok-ops=*"


def _ingested(tmp: Path, env: dict[str, str]) -> Path:
    home = tmp / "home"
    events = tmp / "sample.jsonl"
    events.write_text(sample.jsonl())
    cli(home, "ingest", str(events), env=env)
    return home


def _secret(out: str) -> str:
    found = re.search(r"(whsec_\S+)", out)
    assert found, out
    return found[1]


def test_subscribe_then_the_sample_scenario_delivers_to_each_channel(tmp_path: Path) -> None:
    with receiver() as box, smtp_server() as mail:
        env = {"JOBTRAIL_TOPOLOGY": TOPOLOGY, "JOBTRAIL_ALERT_HOSTS": "127.0.0.1",
               "JOBTRAIL_SMTP": f"{mail.host}:{mail.port}",
               "JOBTRAIL_SMTP_FROM": "jobtrail@cluster.example",
               "JOBTRAIL_PUBLIC_URL": "https://jt.example",
               "JOBTRAIL_GRAFANA_URL": "https://grafana.example"}
        home = _ingested(tmp_path, env)

        def run(*args: str) -> str:
            return cli(home, *args, env=env).stdout

        # the sample is last week's: --history pages what was over before it was seen
        made = run("subscribe", "fabric", "--history", "--owner", "team:network", "--match",
                   "team=network", "--channel", "webhook", "--url", f"{box.url}/hook")
        box.secrets["/hook"] = [_secret(made)]
        run("subscribe", "fabric-chat", "--history", "--owner", "team:network", "--match",
            "team=network", "--match", "severity=~sev[12]", "--channel", "slack", "--url",
            f"{box.url}/services/T0/B0/secretpath")
        run("subscribe", "fabric-mail", "--history", "--owner", "team:network", "--match",
            "team=network", "--channel", "email", "--to", "net-oncall@example.com")
        run("subscribe", "disks", "--history", "--owner", "team:storage", "--match",
            "team=storage", "--channel", "webhook", "--url", f"{box.url}/storage")
        listed = run("subscriptions")
        assert len(listed.splitlines()) == 4 and "secretpath" not in listed
        assert "slack:http://127.0.0.1/…" in listed

        first = run("notify", "--once")
        assert re.search(r"delivered: sent \d+", first), first
        hooks = box.unique("/hook")
        assert hooks and all(r.verified for r in box.at("/hook"))
        opened = next(r.json for r in hooks.values() if r.json["transition"] == "opened")
        inc = opened["incident"]
        assert (inc["class"], inc["entity"], inc["owner"]) == ("network", "leaf-05/p9",
                                                               "network")
        assert inc["impact"]["gpus"] == 512 and inc["recovery"]
        assert opened["links"]["incident"].startswith("https://grafana.example/d/"
                                                      "jobtrail-incident?var-incident=inc-")
        assert opened["links"]["timeline"].startswith(
            "https://grafana.example/d/jobtrail-job?var-project=llm-pretrain&var-job=job-7b-001"
            "&var-attempt=1&from=")
        chat = box.at("/services/T0/B0/secretpath")
        assert len(chat) == len(hooks)  # sev1: the same transitions as the webhook
        assert {"text", "blocks", "attachments"} == set(chat[0].json)
        assert len(mail.messages) == len(hooks)
        assert mail.messages[0]["To"] == "net-oncall@example.com"
        assert "leaf-05/p9" in mail.messages[0]["Subject"]
        # the storage team hears of its own incident only
        stored = box.at("/storage")
        assert {r.json["incident"]["owner"] for r in stored} == {"storage"}
        assert not {r.json["incident"]["id"] for r in stored} & {
            r.json["incident"]["id"] for r in hooks.values()}

        outbox = run("notifications")
        assert "folded into the first message" in outbox
        assert run("deliveries").count(" sent ") == 3 * len(hooks) + len(stored)
        # what was delivered shows as delivered (from the delivery records), not pending
        assert outbox.count(" delivered ") == 3 * len(hooks) + len(stored)
        assert " pending " not in outbox
        # a second pass sends nothing again; a redelivery sends one, under the same id
        assert "nothing due" in run("notify", "--once")
        assert len(box.at("/hook")) == len(hooks)
        notification = opened["id"]
        run("redeliver", notification)
        run("notify", "--once")
        again = [r for r in box.at("/hook") if r.headers["webhook-id"] == notification]
        assert len(again) == 2 and again[1].json == again[0].json | {} and again[1].verified
        test = run("subscriptions", "test", next(
            line.split()[0] for line in listed.splitlines() if " disks " in line))
        assert test.startswith("test 200")
        assert box.at("/storage")[-1].json["type"] == "incident.test"


def test_sigkill_mid_send_is_at_least_once_under_the_same_webhook_id(tmp_path: Path) -> None:
    with receiver() as box:
        env = {"JOBTRAIL_TOPOLOGY": TOPOLOGY, "JOBTRAIL_ALERT_HOSTS": "127.0.0.1"}
        home = _ingested(tmp_path, env)
        made = cli(home, "subscribe", "fabric", "--history", "--owner", "team:network",
                   "--match", "team=network", "--on", "opened", "--channel", "webhook", "--url",
                   f"{box.url}/hook", env=env).stdout
        box.secrets["/hook"] = [_secret(made)]
        box.on("/hook", (200, {}, 6.0))  # the first answer is slow: the worker dies waiting
        worker = subprocess.Popen([*JOBTRAIL, "--home", str(home), "notify", "--once"],
                                  cwd=ROOT, env=_env(env), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not box.started:
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.05)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        assert cli(home, "deliveries", env=env).stdout == ""  # the send was never recorded
        cli(home, "notify", "--once", env=env)
        deadline = time.monotonic() + 30
        while len(box.at("/hook")) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        ids = [r.headers["webhook-id"] for r in box.at("/hook")]
        assert len(ids) == 2 and len(set(ids)) == 1  # twice, one id: the receiver keeps one
        assert len(box.unique("/hook")) == 1 and all(r.verified for r in box.at("/hook"))
        assert "nothing due" in cli(home, "notify", "--once", env=env).stdout


def test_http_subscriptions_are_bound_to_the_tokens_projects(tmp_path: Path) -> None:
    with receiver() as box:
        env = {"JOBTRAIL_TOPOLOGY": TOPOLOGY, "JOBTRAIL_ALERT_HOSTS": "127.0.0.1",
               "JOBTRAIL_API_TOKENS": TOKENS, "JOBTRAIL_ALERTS_INTERVAL_S": "0.5"}
        home = _ingested(tmp_path, env)
        with serve(home, env) as server:
            api = f"{server.url}/v1/subscriptions"
            body: dict[str, Any] = {"name": "ours", "owner": "team:llm", "history": True,
                                    "matchers": ["severity=~sev[12]"],
                                    "channel": {"kind": "webhook", "url": f"{box.url}/llm"}}
            foreign = http("POST", api, {**body, "projects": ["vision"]}, token="tok-llm")
            assert foreign.status == 403 and "vision" in foreign.body["error"]
            bad = http("POST", api, {**body, "matchers": ["colour=red"]}, token="tok-llm")
            assert bad.status == 422 and "label must be one of" in bad.body["error"]
            made = http("POST", api, body, token="tok-llm")
            assert made.status == 201, made.body
            sub = made.body
            assert sub["projects"] == ["llm-pretrain"] and sub["signing_secret"]
            assert "url" not in json.dumps(sub["channel"]) and "/llm" not in json.dumps(sub)
            box.secrets["/llm"] = [sub["signing_secret"]]
            listed = http("GET", api, token="tok-llm").body["subscriptions"]
            assert [s["id"] for s in listed] == [sub["id"]] and "signing_secret" not in listed[0]
            assert http("GET", api, token="tok-vision").body["subscriptions"] == []
            assert http("GET", f"{api}/{sub['id']}", token="tok-vision").status == 404
            assert http("DELETE", f"{api}/{sub['id']}", token="tok-vision").status == 404
            # the serve loop decides and delivers
            deadline = time.monotonic() + 60
            while not box.at("/llm"):
                assert time.monotonic() < deadline, server.log.read_text()[-2000:]
                time.sleep(0.2)
            delivered = box.at("/llm")[0]
            assert delivered.verified and delivered.json["incident"]["impact"]["gpus"] == 512
            rows = http("GET", f"{server.url}/v1/deliveries", token="tok-llm").body
            assert rows["deliveries"] and http("GET", f"{server.url}/v1/deliveries",
                                               token="tok-vision").body["deliveries"] == []
            tested = http("POST", f"{api}/{sub['id']}/test", token="tok-llm")
            assert tested.status == 200 and tested.body["status"] == "test"
            assert http("POST", f"{server.url}/v1/notifications/"
                                f"{delivered.headers['webhook-id']}/redeliver",
                        token="tok-vision").status == 404
            silences = f"{server.url}/v1/silences"
            sil = http("POST", silences, {"matchers": ["class=network"], "for_s": 3600,
                                          "reason": "fabric maintenance"}, token="tok-llm")
            assert sil.status == 201 and sil.body["projects"] == ["llm-pretrain"]
            assert http("GET", silences, token="tok-llm").body["silences"][0]["id"] == \
                sil.body["id"]
            assert http("GET", silences, token="tok-vision").body["silences"] == []
            assert http("POST", silences, {"matchers": [], "for_s": 60, "reason": "x"},
                        token="tok-llm").status == 422
            # one-click unsubscribe from an email link: the token in it, not a bearer
            link = f"{api}/{sub['id']}/unsubscribe"
            assert http("POST", f"{link}?token=forged").status == 403
            from jobtrail.alerts.links import unsubscribe_token
            from jobtrail.alerts.secrets import Secrets

            token = unsubscribe_token(Secrets(home), sub["id"])
            assert http("POST", f"{link}?token={token}").status == 200
            after = http("GET", f"{api}/{sub['id']}", token="tok-llm").body
            assert after["enabled"] is False
            assert http("DELETE", f"{api}/{sub['id']}", token="tok-llm").status == 200


def test_a_backfill_pages_only_what_is_not_over_and_says_how_old_it_is(
        tmp_path: Path) -> None:
    """The sample is last week's events, ingested (seen) today. Its network incident was
    over (the job recovered) before jobtrail saw it: nobody is paged, and the outbox says
    why. Its storage and node incidents are still open: paged, saying the event time, its
    age and when jobtrail first saw them. With --history, the network one is paged too."""
    with receiver() as box:
        env = {"JOBTRAIL_TOPOLOGY": TOPOLOGY, "JOBTRAIL_ALERT_HOSTS": "127.0.0.1"}
        home = _ingested(tmp_path, env)
        cli(home, "subscribe", "all", "--owner", "team:ops", "--channel", "webhook",
            "--url", f"{box.url}/live", env=env)
        cli(home, "subscribe", "past", "--history", "--owner", "team:ops", "--channel",
            "webhook", "--url", f"{box.url}/past", env=env)
        cli(home, "notify", "--once", env=env)
        live = [r.json for r in box.unique("/live").values()]
        past = [r.json for r in box.unique("/past").values()]
        assert {m["incident"]["class"] for m in live} == {"storage_io", "node_failure"}
        assert "network" in {m["incident"]["class"] for m in past}
        outbox = cli(home, "notifications", env=env).stdout
        assert re.search(r"history: over at 2026-11-30 \d\d:\d\d UTC, before jobtrail saw it "
                         r"at 20\d\d-\d\d-\d\d \d\d:\d\d UTC \(a backfill\)", outbox), outbox
        for m in live:
            assert m["age_s"] > 86400 and m["push"].endswith(" days ago)")
            assert m["incident"]["seen_at"][:10] != m["time"][:10]
