"""The acknowledge link in a message, over HTTP and in a real browser: signed (incident,
subscription, expiry) and expiring; a page with a button, never raw JSON; for a person
signed in through the existing login (a browser that is not goes there and comes back), who
is the actor the log records; a repeat click says who acknowledged and when; a GET only
shows (a link scanner never acknowledges). The link may do only what both the person and
the subscription's creator may do now: a creator demoted to viewer, or whose token is gone,
has links that refuse (issue 40, finding 6). Screenshots of the page go to
JOBTRAIL_TEST_ARTEFACTS (else tmp_path)."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from jobtrail.alerts.links import ack_link
from jobtrail.alerts.secrets import Secrets
from jobtrail.learn import sample
from tests.alerts_kit import receiver
from tests.trust_kit import ROOT, Reply, cli, http, serve

TOPOLOGY = str(ROOT / "examples" / "topology-64.yaml")
TOKENS = ("tok-ana=llm-pretrain,user:ic-ana,role:responder;"
          "tok-bob=llm-pretrain,user:bob,role:responder;"
          "tok-vic=llm-pretrain,user:vic,role:viewer;tok-ops=*")
ENV = {"JOBTRAIL_TOPOLOGY": TOPOLOGY, "JOBTRAIL_ALERT_HOSTS": "127.0.0.1",
       "JOBTRAIL_PUBLIC_URL": "https://jt.example"}


class _Stay(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is the answer under test, not followed


def _call(method: str, url: str, token: str = "", accept: str = "") -> tuple[Reply, Any]:
    """One request, redirects not followed; the reply (JSON or text) and its headers."""
    import json

    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if accept:
        request.add_header("Accept", accept)
    try:
        with urllib.request.build_opener(_Stay).open(request, timeout=60) as resp:
            raw, status, headers = resp.read(), resp.status, resp.headers
    except urllib.error.HTTPError as exc:
        raw, status, headers = exc.read(), exc.code, exc.headers
    try:
        return Reply(status, json.loads(raw)), headers
    except ValueError:
        return Reply(status, raw.decode("utf-8", "replace")), headers


def _opened_link(tmp_path: Path) -> tuple[Path, str, str]:
    """A home with the sample's network incident and the acknowledge link its subscription's
    first message carried (the public URL is https://jt.example)."""
    home = tmp_path / "home"
    events = tmp_path / "sample.jsonl"
    events.write_text(sample.jsonl())
    cli(home, "ingest", str(events), env=ENV)
    with receiver() as box:
        cli(home, "subscribe", "fabric", "--history", "--owner", "team:network", "--match",
            "team=network", "--channel", "webhook", "--url", f"{box.url}/hook", env=ENV)
        cli(home, "notify", "--once", env=ENV)
        sent = [r.json for r in box.unique("/hook").values()]
    opened = next(m for m in sent if m["transition"] == "opened")
    link = opened["links"]["ack"]
    inc = opened["incident"]["id"]
    assert link.startswith(f"https://jt.example/v1/incidents/{inc}/ack?sub=")
    return home, inc, link


def _ack_entries(url: str, inc: str) -> list[dict[str, Any]]:
    shown = http("GET", f"{url}/v1/incidents/{inc}", token="tok-ops").body
    return [e for e in shown["log"] if e["kind"] == "acknowledged"]


def test_the_ack_link_acknowledges_as_the_person_and_then_says_who_did(tmp_path: Path) -> None:
    home, inc, link = _opened_link(tmp_path)
    with serve(home, {**ENV, "JOBTRAIL_API_TOKENS": TOKENS}) as server:
        url = link.replace("https://jt.example", server.url)
        # a browser that is not signed in: a page that reloads the link from this site (its
        # SameSite=Strict cookie then comes along), then the login, which comes back here
        hop, headers = _call("GET", url)
        assert hop.status == 200 and "<!doctype html>" in hop.body
        assert headers["Refresh"].endswith("&hop=1")
        login, headers = _call("GET", f"{url}&hop=1")
        assert login.status == 302 and headers["Location"].startswith("/auth/login?next=")
        assert _call("POST", url)[0].status == 401  # nobody signed in acknowledges nothing
        # the page, not JSON, for a person signed in
        shown, headers = _call("GET", url, token="tok-ana")
        assert shown.status == 200 and headers["Content-Type"].startswith("text/html")
        assert 'id="ack-button">Acknowledge as ic-ana</button>' in shown.body
        assert _call("GET", url.replace("token=", "token=0"), token="tok-ana")[0].status == 403
        refused = _call("GET", url, token="tok-vic", accept="application/json")[0]
        assert refused.status == 403 and "vic is a viewer" in refused.body["error"]
        assert _ack_entries(server.url, inc) == []  # GETs (a mail scanner's) changed nothing
        sub_id = url.split("sub=")[1].split("&")[0]
        old = ack_link(server.url, Secrets(home), inc, sub_id, int(time.time()) - 60)
        expired = _call("POST", old, token="tok-ana", accept="application/json")[0]
        assert expired.status == 410 and expired.body["state"] == "expired"

        done = _call("POST", url, token="tok-ana", accept="application/json")[0]
        assert done.status == 200 and done.body["state"] == "done", done.body
        (entry,) = _ack_entries(server.url, inc)
        assert (entry["actor_kind"], entry["actor"]) == ("person", "ic-ana")  # the person
        # a second click, by anyone: who acknowledged and when (not `410 already used`)
        again = _call("POST", url, token="tok-bob", accept="application/json")[0]
        assert again.status == 200 and again.body["state"] == "done"
        assert again.body["acknowledged_by"].startswith("ic-ana (via token:")
        assert again.body["acknowledged_at"].startswith(str(entry["time"])[:16].replace(" ", "T"))
        page = _call("GET", url, token="tok-bob")[0]
        assert "Acknowledged by <strong>ic-ana (via token:" in page.body
        assert "ack-button" not in page.body
        assert len(_ack_entries(server.url, inc)) == 1


def test_an_ack_link_does_only_what_its_creator_may_do_now(tmp_path: Path) -> None:
    """Issue 40, finding 6: bob (a responder) subscribes; demoted to viewer, or his token
    removed, the links of his subscription's messages acknowledge nothing, whoever clicks."""
    home = tmp_path / "home"
    events = tmp_path / "sample.jsonl"
    events.write_text(sample.jsonl())
    cli(home, "ingest", str(events), env=ENV)
    expires = int(time.time()) + 3600
    with serve(home, {**ENV, "JOBTRAIL_API_TOKENS": TOKENS}) as server:
        made = http("POST", f"{server.url}/v1/subscriptions", {
            "name": "bob-hook", "owner": "team:network",
            "channel": {"kind": "webhook", "url": "https://hooks.example.com/x"}},
            token="tok-bob")
        assert made.status == 201, made.body
        sub_id = made.body["id"]
        listed = http("GET", f"{server.url}/v1/incidents", token="tok-ops").body["incidents"]
        inc = next(i["incident_id"] for i in listed if i["class"] == "network")
        link = ack_link(server.url, Secrets(home), inc, sub_id, expires)
        offered = _call("GET", link, token="tok-ana", accept="application/json")[0]
        assert offered.status == 200, offered.body  # a responder's link, while he is one
    for tokens, why in [
            (TOKENS.replace("user:bob,role:responder", "user:bob,role:viewer"),
             "bob is a viewer"),
            (TOKENS.replace("tok-bob=llm-pretrain,user:bob,role:responder;", ""),
             "bob, who made the subscription behind this link, no longer has a configured "
             "token")]:
        with serve(home, {**ENV, "JOBTRAIL_API_TOKENS": tokens}) as server:
            link = ack_link(server.url, Secrets(home), inc, sub_id, expires)
            for clicker in ("tok-ana", "tok-ops"):
                refused = _call("POST", link, token=clicker, accept="application/json")[0]
                assert refused.status == 403, refused.body
                assert "may do only what the subscription's creator may do now" in \
                    refused.body["error"] and why in refused.body["error"]
            page = _call("GET", link, token="tok-ops")[0]
            assert page.status == 403 and why in page.body and "ack-button" not in page.body
            assert _ack_entries(server.url, inc) == []
            made = http("GET", f"{server.url}/v1/subscriptions/{sub_id}", token="tok-ops")
            assert made.body["creator"]["role"] == "responder"  # as he was when he made it


def test_the_ack_page_in_a_real_browser(tmp_path: Path) -> None:
    """Clicked in a chat app (a cross-site navigation) by someone not signed in: the login,
    back to the page, the button; then, signed in, clicked again from the chat: the page says
    who acknowledged and when."""
    from playwright.sync_api import sync_playwright

    from tests.test_postmortem_flows import _chromium

    shots = Path(os.environ.get("JOBTRAIL_TEST_ARTEFACTS") or tmp_path) / "ack-page"
    shots.mkdir(parents=True, exist_ok=True)
    home, inc, link = _opened_link(tmp_path)
    with serve(home, {**ENV, "JOBTRAIL_API_TOKENS": TOKENS,
                      "JOBTRAIL_GRAFANA_URL": "https://grafana.example"}) as server, \
            sync_playwright() as p:
        url = link.replace("https://jt.example", server.url)
        chat = tmp_path / "chat.html"  # another site (file://): where the message was read
        chat.write_text(f'<!doctype html><a id="ack" href="{url}">Acknowledge</a>')
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text)
                    if "Content Security Policy" in m.text else None)
            page.goto(chat.as_uri())
            with page.expect_navigation(url="**/auth/login?next=**", timeout=30_000):
                page.click("#ack")
            # a page, not a bare token box: what it is, where they go next, styled
            assert page.locator("h1").inner_text() == "Sign in to jobtrail"
            assert page.locator("#going").inner_text() == (
                f"Then you acknowledge incident {inc}, as yourself.")
            assert page.locator("main").evaluate(
                "m => getComputedStyle(m).backgroundColor") == "rgb(255, 255, 255)"
            page.screenshot(path=str(shots / "sign-in.png"), full_page=True)
            page.fill("input[name=token]", "tok-ana")
            with page.expect_navigation(timeout=30_000):
                page.click("form button")
            assert page.locator("#ack-button").inner_text() == "Acknowledge as ic-ana"
            assert page.locator("#viewer").inner_text() == "Signed in as ic-ana (responder)"
            assert page.locator("#link-dashboard").get_attribute("href") == (
                f"https://grafana.example/d/jobtrail-incident?var-incident={inc}")
            assert page.locator("main").evaluate(
                "m => getComputedStyle(m).backgroundColor") == "rgb(255, 255, 255)"
            page.screenshot(path=str(shots / "offer.png"), full_page=True)
            with page.expect_navigation(timeout=30_000):
                page.click("#ack-button")
            done = page.locator("#done").inner_text()
            assert done.startswith("Acknowledged by ic-ana (via token:") and " UTC." in done
            page.screenshot(path=str(shots / "acknowledged.png"), full_page=True)
            (entry,) = _ack_entries(server.url, inc)
            assert (entry["actor_kind"], entry["actor"]) == ("person", "ic-ana")
            # signed in, from the chat again: straight to the page, which says who and when
            page.goto(chat.as_uri())
            with page.expect_navigation(url="**/ack?**hop=1", timeout=30_000):
                page.click("#ack")
            assert page.locator("#done").inner_text() == done
            assert page.locator("#ack-button").count() == 0
            page.screenshot(path=str(shots / "again.png"), full_page=True)
            assert len(_ack_entries(server.url, inc)) == 1
            assert errors == [], errors
        finally:
            browser.close()


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
