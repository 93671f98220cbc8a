"""The acknowledge link in a message, over HTTP: signed (incident, subscription, expiry),
single use, expiring; a GET only confirms (a link scanner never acknowledges); a POST
acknowledges as the subscription's creator (its owner, for one an operator made), which
stops the reminders; a tenant's link acknowledges only what its creator may
(tests/test_trust_probe.py)."""

from __future__ import annotations

import time
from pathlib import Path

from jobtrail.alerts.links import ack_link
from jobtrail.alerts.secrets import Secrets
from jobtrail.learn import sample
from tests.alerts_kit import receiver
from tests.trust_kit import ROOT, cli, http, serve

TOPOLOGY = str(ROOT / "examples" / "topology-64.yaml")


def test_the_ack_link_acknowledges_once_as_the_owner_and_expires(tmp_path: Path) -> None:
    with receiver() as box:
        env = {"JOBTRAIL_TOPOLOGY": TOPOLOGY, "JOBTRAIL_ALERT_HOSTS": "127.0.0.1",
               "JOBTRAIL_PUBLIC_URL": "https://jt.example"}
        home = tmp_path / "home"
        events = tmp_path / "sample.jsonl"
        events.write_text(sample.jsonl())
        cli(home, "ingest", str(events), env=env)
        cli(home, "subscribe", "fabric", "--owner", "team:network", "--match",
            "team=network", "--channel", "webhook", "--url", f"{box.url}/hook", env=env)
        cli(home, "notify", "--once", env=env)
        sent = [r.json for r in box.unique("/hook").values()]
        opened = next(m for m in sent if m["transition"] == "opened")
        link = opened["links"]["ack"]
        assert link.startswith(f"https://jt.example/v1/incidents/{opened['incident']['id']}"
                               "/ack?sub=")
        assert f"Acknowledge: {link}" not in str(opened)  # the JSON carries the link itself
        inc = opened["incident"]["id"]
        with serve(home, {**env, "JOBTRAIL_API_TOKENS": "tok-ops=*"}) as server:
            url = link.replace("https://jt.example", server.url)
            confirm = http("GET", url)
            assert confirm.status == 200 and "POST this URL" in confirm.body["confirm"]
            assert http("GET", f"{server.url}/v1/incidents/{inc}", token="tok-ops") \
                .body["status"] == "open"  # a GET (a mail scanner's) changed nothing
            assert http("POST", url.replace("token=", "token=0")).status == 403
            done = http("POST", url)
            assert done.status == 200, done.body
            assert done.body["acknowledged"] == inc
            assert done.body["by"].startswith("team:network via ack-link:sub-")
            assert http("POST", url).status == 410  # single use
            shown = http("GET", f"{server.url}/v1/incidents/{inc}", token="tok-ops").body
            assert shown["status"] == "acknowledged"
            sub_id = url.split("sub=")[1].split("&")[0]
            old = ack_link(server.url, Secrets(home), inc, sub_id, int(time.time()) - 60)
            expired = http("POST", old)
            assert expired.status == 410 and "expired" in expired.body["error"]


def test_subscribe_refuses_a_channel_it_would_never_reach(tmp_path: Path) -> None:
    home = tmp_path / "home"
    mail = cli(home, "subscribe", "m", "--owner", "team:x", "--channel", "email", "--to",
               "x@example.com", check=False)
    assert mail.returncode == 2 and "email needs a mail server (JOBTRAIL_SMTP" in mail.stderr
    hook = cli(home, "subscribe", "h", "--owner", "team:x", "--channel", "slack",
               "--url-env", "JOBTRAIL_CHANNEL_FABRIC", check=False,
               env={"JOBTRAIL_CHANNEL_FABRIC": "http://169.254.169.254/latest"})
    assert hook.returncode == 2 and "--url-env" in hook.stderr, hook.stderr
    assert "Traceback" not in hook.stderr + mail.stderr
