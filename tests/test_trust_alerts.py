"""Issue 25, the alerting and subscription surfaces: each finding reproduced as an attack.

Channels (SSRF) against real receivers on loopback with the resolver injected; deliveries
against the store in chDB; subscriptions, silences, follow-ups and `/test` through `jobtrail
serve` as a real process (tests/trust_kit.py); the dev ClickHouse server over raw HTTP.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jobtrail.alerts import egress
from jobtrail.alerts.egress import NOT_DELIVERED, ChannelRefused, Policy
from jobtrail.alerts.secrets import Secrets
from jobtrail.alerts.store import AlertStore
from jobtrail.alerts.worker import Deliverer, decide_pass
from jobtrail.config import Settings
from jobtrail.store import Store
from processors.notify.model import Matcher, Silence, Subscription
from tests.alerts_kit import Receiver, receiver
from tests.credentials import KINDS, leaked
from tests.credentials import Case as CredentialCase
from tests.credentials import Placement as CredentialPlacement
from tests.trust_kit import ROOT, cli, free_port, http, jsonl, serve

TOPOLOGY = str(ROOT / "examples" / "topology-64.yaml")


@pytest.fixture
def box() -> Iterator[Receiver]:
    with receiver() as b:
        yield b


def _resolver(table: dict[str, list[str]], calls: list[str] | None = None) -> egress.Resolver:
    """/etc/hosts in a dict: the names a test's "DNS" knows."""

    def resolve(host: str, port: int) -> Sequence[str]:
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise OSError(f"unknown host {host}")
        return table[host]

    return resolve


HOSTS = {
    "hooks.corp.example": ["127.0.0.1"],  # an /etc/hosts entry pointing inside
    "split.example": ["93.184.216.34", "127.0.0.1"],  # one public address, one inside
    "metadata.example": ["169.254.169.254"],
    "cgnat.example": ["100.64.3.4"],
    "private.example": ["10.1.2.3"],
    "multicast.example": ["224.0.0.251"],
    "zero.example": ["0.0.0.0"],
    "v6-loopback.example": ["::1"],
    "v6-mapped.example": ["::ffff:127.0.0.1"],
    "v6-linklocal.example": ["fe80::1"],
    "v6-ula.example": ["fd12:3456::1"],
    "nat64.example": ["64:ff9b::7f00:1"],
    "6to4.example": ["2002:7f00:1::1"],
    "teredo.example": ["2001:0:4136:e378:8000:63bf:80ff:fffe"],
}
# every way to write "inside" as a URL's host; {p} is a live receiver's port on 127.0.0.1
SPELLINGS = [
    "http://127.0.0.1:{p}/", "http://2130706433:{p}/", "http://0x7f000001:{p}/",
    "http://0177.0.0.1:{p}/", "http://127.1:{p}/", "http://0x7f.0.0.1:{p}/",
    "http://0x7f.1:{p}/", "http://017700000001:{p}/", "http://127.0.0.1.:{p}/",
    "http://[::1]:{p}/", "http://[::ffff:127.0.0.1]:{p}/", "http://[::ffff:7f00:1]:{p}/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]:{p}/", "http://[64:ff9b::127.0.0.1]:{p}/",
    "http://[2002:7f00:0001::]:{p}/", "http://[::127.0.0.1]:{p}/", "http://0.0.0.0:{p}/",
    "http://0:{p}/", "http://[::]:{p}/", "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]:{p}/", "http://100.64.0.1:{p}/", "http://10.0.0.1:{p}/",
    "http://192.168.1.1:{p}/", "http://172.16.0.1:{p}/", "http://224.0.0.1:{p}/",
    "http://255.255.255.255:{p}/", "http://[fc00::1]:{p}/", "http://[ff02::1]:{p}/",
    "http://localhost:{p}/", "http://LOCALHOST.:{p}/",
    *[f"http://{name}:{{p}}/" for name in HOSTS],
]
MALFORMED = [
    "http://127.0.0.1:1\\@example.com/x", "http://user:pw@example.com/", "http://@127.0.0.1/",
    "ftp://example.com/", "file:///etc/passwd", "gopher://127.0.0.1:70/", "http:///x",
    "http://example.com:99999/", "http://999.0.0.1/", "http://1.2.3.4.5/",
    "http://exa mple.com/", "http://example.com/\r\nX-Injected: 1", "http://[::1%25lo]/",
    "http://example.com:0/",
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_ssrf_table_every_spelling_of_inside_is_refused_and_never_reached(
        spelling: str, box: Receiver) -> None:
    url = spelling.format(p=box.url.rsplit(":", 1)[1])
    answer = egress.post(url, b"{}", {}, policy=Policy(),
                         resolver=_resolver(HOSTS | {"localhost": ["127.0.0.1", "::1"]}),
                         timeout_s=2)
    assert answer.code == -1, (url, answer)
    assert "not public" in answer.error or "tunnel" in answer.error, answer.error
    assert box.requests == []  # refused before any connection
    if not any(name in url for name in [*HOSTS, "localhost", "LOCALHOST"]):
        with pytest.raises(ChannelRefused):  # and refused when the channel is made
            egress.check_url(url, Policy())


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_channel_url_is_refused_with_a_reason(url: str) -> None:
    with pytest.raises(ChannelRefused) as refused:
        egress.check_url(url, Policy.from_hosts(["127.0.0.1"]))
    assert str(refused.value)


def test_an_opened_address_opens_only_itself(box: Receiver) -> None:
    """An operator lists 127.0.0.1 for a local receiver: the receiver is reached; ::1, the
    rest of 127/8, and a name with one address outside the list are not."""
    port = box.url.rsplit(":", 1)[1]
    policy = Policy.from_hosts(["127.0.0.1"])
    names = _resolver({"both.example": ["127.0.0.1", "::1"], "ok.example": ["127.0.0.1"]})
    assert egress.post(f"{box.url}/ok", b"{}", {}, policy=policy).code == 200
    for url in (f"http://[::1]:{port}/", f"http://127.0.0.2:{port}/",
                f"http://both.example:{port}/", f"http://169.254.169.254:{port}/"):
        assert egress.post(url, b"{}", {}, policy=policy, resolver=names).code == -1, url
    assert egress.post(f"http://ok.example:{port}/named", b"{}", {}, policy=policy,
                       resolver=names).code == 200
    assert [r.path for r in box.requests] == ["/ok", "/named"]
    only_names = Policy.from_hosts(["hooks.slack.com"])
    for url in ("http://evil.example/", "http://8.8.8.8/", "http://[2606:4700::1111]/"):
        assert "not in JOBTRAIL_ALERT_HOSTS" in egress.post(
            url, b"{}", {}, policy=only_names, resolver=names).error


@pytest.fixture
def v6_box() -> Iterator[Receiver]:
    """A receiver on [::1] (where a redirect would land)."""
    import socket

    class V6(ThreadingHTTPServer):
        address_family = socket.AF_INET6

    box = Receiver("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            box.requests.append(None)  # type: ignore[arg-type]
            self.send_response(200)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    try:
        server = V6(("::1", 0), Handler)
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    box.url = f"http://[::1]:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_is_never_followed_even_from_an_allowed_host(box: Receiver,
                                                                v6_box: Receiver) -> None:
    box.on("/hop", (302, {"Location": f"{v6_box.url}/inside"}, 0))
    box.on("/same", (307, {"Location": f"{box.url}/landing"}, 0))
    policy = Policy.from_hosts(["127.0.0.1"])
    for path in ("/hop", "/same"):
        answer = egress.post(f"{box.url}{path}", b"{}", {}, policy=policy)
        assert answer.code == -1 and "redirects are not followed" in answer.error
    assert [r.path for r in box.requests] == ["/hop", "/same"]  # no /landing
    assert v6_box.requests == []  # [::1] never reached


def test_the_checked_address_is_the_one_connected(box: Receiver) -> None:
    """DNS rebinding: the name resolves once; the connection goes to that address with the
    name in the Host header; a second resolution (now inside) never happens."""
    port = int(box.url.rsplit(":", 1)[1])
    answers = iter([["127.0.0.1"], ["10.9.9.9"]])
    calls: list[str] = []

    def rebinding(host: str, _: int) -> Sequence[str]:
        calls.append(host)
        return next(answers)

    answer = egress.post(f"http://rebind.example:{port}/x", b"{}", {},
                         policy=Policy.from_hosts(["127.0.0.1"]), resolver=rebinding)
    assert answer.code == 200 and calls == ["rebind.example"]
    assert box.requests[0].headers["host"] == f"rebind.example:{port}"


# --- finding 4: one tenant's bad URL spams every other subscriber ------------------------


def _load(store: Store, name: str) -> None:
    from jobtrail.learn import scenarios
    from jobtrail.runtime.sink import Sink
    from processors.pipeline import Pipeline

    story = scenarios.load(scenarios.LIBRARY / f"{name}.yaml")
    Sink(store, Pipeline(timedelta(seconds=30), scenarios.wiring(story),
                         rules=story.rules)).handle(story.events)


def _sub(alerts: AlertStore, secrets: Secrets, name: str, url: str) -> Subscription:
    target = secrets.put(f"sub-{name}/url", url)
    return alerts.put_subscription(Subscription.model_validate({
        "id": f"sub-{name}", "name": name, "owner": f"team:{name}",
        "matchers": [Matcher.parse("team=network").model_dump()],
        "channel": {"kind": "slack", "target": target}, "repeat_s": 0, "max_age_s": 0,
        "history": True}),
        by="test")


def test_one_bad_channel_never_spams_the_other_subscribers(store: Store, tmp_path: Path,
                                                           box: Receiver) -> None:
    """A URL stored before channels were checked (as the issue's) fails alone, once; the
    others get each message once, and a second pass sends nothing again."""
    _load(store, "ib-flap-64")
    alerts, secrets = AlertStore(store), Secrets(tmp_path, env={})
    _sub(alerts, secrets, "bad", "http://127.0.0.1:1\\@example.com/x")
    _sub(alerts, secrets, "good-a", f"{box.url}/a")
    _sub(alerts, secrets, "good-b", f"{box.url}/b")
    deliverer = Deliverer(alerts, secrets, Settings(home=tmp_path, alert_hosts=("127.0.0.1",)))
    now = datetime.now(UTC)
    decide_pass(alerts, now)
    attempts = deliverer.run(now)
    bad = [a for a in attempts if a.subscription_id == "sub-bad"]
    assert bad and {a.status for a in bad} == {"gave_up"} and bad[0].error == NOT_DELIVERED
    sent = [a for a in attempts if a.subscription_id != "sub-bad"]
    assert sent and {a.status for a in sent} == {"sent"}
    for path in ("/a", "/b"):
        assert len(box.at(path)) == len({a.notification_id for a in sent
                                          if a.subscription_id == f"sub-good-{path[1]}"})
    before = len(box.requests)
    for later in (now + timedelta(minutes=1), now + timedelta(hours=2)):
        deliverer.run(later)
    assert len(box.requests) == before


def test_a_pass_that_stops_half_way_never_resends_what_it_sent(store: Store, tmp_path: Path,
                                                               box: Receiver) -> None:
    _load(store, "ib-flap-64")
    alerts, secrets = AlertStore(store), Secrets(tmp_path, env={})
    _sub(alerts, secrets, "net", f"{box.url}/net")
    deliverer = Deliverer(alerts, secrets, Settings(home=tmp_path, alert_hosts=("127.0.0.1",)))
    now = datetime.now(UTC)
    decide_pass(alerts, now)
    jobs, cancelled = deliverer.prepare(now)
    assert len(jobs) >= 2

    sent: list[Any] = []
    with pytest.raises(RuntimeError):
        deliverer.deliver(_Crashing(jobs[:1]), now, sent)
    deliverer.finish(sent, cancelled, now)
    assert len(box.requests) == 1
    deliverer.run(now + timedelta(seconds=1))
    ids = [r.headers["webhook-id"] if "webhook-id" in r.headers else r.json.get("text", "")
           for r in box.requests]
    assert len(box.requests) == len(jobs) and len(set(ids)) == len(ids)  # none twice


class _Crashing(list[Any]):
    """The jobs of a pass that dies after sending them (a bug, a kill of the thread)."""

    def __iter__(self) -> Iterator[Any]:
        yield from list.__iter__(self)
        raise RuntimeError("the pass dies here")


# --- finding 5: an empty project list silences nothing ------------------------------------


def test_an_empty_project_list_silences_nothing() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    labels = {"project": ("vision",), "severity": ("sev1",)}
    common = {"matchers": (Matcher.parse("severity=~.*"),), "starts": now,
              "ends": now + timedelta(hours=1), "reason": "r"}
    assert not Silence(id="s1", **common).covers(labels, now)  # type: ignore[arg-type]
    assert not Silence(id="s2", projects=("llm",), **common).covers(  # type: ignore[arg-type]
        labels, now)
    assert Silence(id="s3", projects=("vision",), **common).covers(  # type: ignore[arg-type]
        labels, now)
    assert Silence(id="s4", all_projects=True, **common).covers(  # type: ignore[arg-type]
        labels, now)


# --- findings 1, 4, 5, 6 over HTTP, as a tenant would try them -----------------------------


TOKENS = ("tok-llm=llm-pretrain;tok-llm2=llm-pretrain;tok-ops=*;tok-infra=@infra;"
          "tok-vision=vision")


def test_tenants_cannot_point_channels_inside_or_take_others_subscriptions(
        tmp_path: Path) -> None:
    dead = free_port()  # allowed by the operator, nothing listens: unreachable
    env = {"JOBTRAIL_API_TOKENS": TOKENS, "JOBTRAIL_ALERT_HOSTS": "127.0.0.9",
           "JOBTRAIL_ALERTS_INTERVAL_S": "0", "JOBTRAIL_ALERT_TIMEOUT_S": "1",
           "JOBTRAIL_CHANNEL_INSIDE": "http://169.254.169.254/latest/meta-data/",
           "JOBTRAIL_WIRE_KEY": "wire-key-that-must-not-leave"}
    with serve(tmp_path / "home", env) as server:
        api = f"{server.url}/v1/subscriptions"

        def post(token: str, name: str, channel: dict[str, Any], **extra: Any) -> Any:
            return http("POST", api, {"name": name, "owner": "team:net", "channel": channel,
                                      **extra}, token=token)

        for n, spelling in enumerate(s for s in SPELLINGS if ".example" not in s):
            made = post("tok-llm", f"in-{n}", {"kind": "webhook",
                                               "url": spelling.format(p=8123)})
            if "localhost" in spelling.lower():
                assert made.status == 201  # a name: checked at every send, when resolved
                continue
            assert made.status == 422 and made.body["error"].startswith("channel.url:"), \
                (spelling, made.body)
        for url in MALFORMED:
            made = post("tok-llm", "bad", {"kind": "slack", "url": url})
            assert made.status == 422 and "channel.url" in made.body["error"], (url, made.body)
        for key in ("url_env", "secret_env"):
            for name in ("JOBTRAIL_WIRE_KEY", "HOME", "JOBTRAIL_CHANNEL_", "AWS_SECRET"):
                channel = {"kind": "webhook", "url": f"http://127.0.0.9:{dead}/", key: name}
                made = post("tok-llm", "env", channel)
                assert made.status == 422 and f"channel.{key}" in made.body["error"], made.body
        # the operator's subscription; a tenant posting the same owner and name makes its
        # own, and can neither replace nor delete the operator's
        ops = post("tok-ops", "pager", {"kind": "slack", "url": f"http://127.0.0.9:{dead}/o"})
        assert ops.status == 201
        mine = post("tok-llm", "pager", {"kind": "slack", "url": f"http://127.0.0.9:{dead}/x"})
        assert mine.status == 201 and mine.body["id"] != ops.body["id"]
        kept = http("GET", f"{api}/{ops.body['id']}", token="tok-ops").body
        assert kept["version"] == 1 and kept["created_by"] == ""
        assert http("DELETE", f"{api}/{ops.body['id']}", token="tok-llm").status == 404
        # another token of the same project sees it, but it is not its to change
        assert http("GET", f"{api}/{mine.body['id']}", token="tok-llm2").status == 200
        assert http("DELETE", f"{api}/{mine.body['id']}", token="tok-llm2").status == 403
        theirs = post("tok-llm2", "pager", {"kind": "slack",
                                            "url": f"http://127.0.0.9:{dead}/y"})
        assert theirs.status == 201 and theirs.body["id"] not in (mine.body["id"],
                                                                  ops.body["id"])
        assert http("GET", f"{api}/{mine.body['id']}", token="tok-llm").body["version"] == 1
        # /test: refused (metadata, through the operator's variable) and unreachable give
        # one answer shape
        inside = post("tok-llm", "inside", {"kind": "slack", "url_env": "JOBTRAIL_CHANNEL_INSIDE"})
        assert inside.status == 201
        answers = [http("POST", f"{api}/{sub_id}/test", token="tok-llm")
                   for sub_id in (inside.body["id"], mine.body["id"])]
        for answer in answers:
            assert answer.status == 502
        shapes = [{k: v for k, v in a.body.items()
                   if k not in ("notification_id", "subscription_id", "message_ids", "at")}
                  for a in answers]
        assert shapes[0] == shapes[1] == {
            "attempt": 1, "status": "test_failed", "code": 0, "latency_ms": 0,
            "error": NOT_DELIVERED, "next_at": None, "channel": "slack"}
        assert "169.254" not in json.dumps(http("GET", f"{server.url}/v1/deliveries",
                                                token="tok-llm").body)
        # silences: an @infra token (no project) silences nothing, so it may not make one
        silences = f"{server.url}/v1/silences"
        everything = {"matchers": ["severity=~.*"], "for_s": 3600, "reason": "quiet"}
        refused = http("POST", silences, everything, token="tok-infra")
        assert refused.status == 403 and "only an operator" in refused.body["error"]
        made = http("POST", silences, {**everything, "by": "mallory"}, token="tok-llm")
        assert made.status == 201
        assert (made.body["projects"], made.body["all_projects"]) == (["llm-pretrain"], False)
        assert made.body["by"] != "mallory"  # the caller, not what it wrote
        assert http("POST", silences, {**everything, "projects": ["vision"]},
                    token="tok-llm").status == 403
        ops_silence = http("POST", silences, everything, token="tok-ops").body
        assert ops_silence["all_projects"] is True
        for bad in ({"for_s": 99999999999 * 3600}, {"for_s": float("nan")},
                    {"ends": "2099-01-01T00:00:00"}, {"for_s": -5}):
            body = {"matchers": ["class=network"], "reason": "x", **bad}
            answer = http("POST", silences, json.dumps(body).encode(), token="tok-llm")
            assert answer.status == 422, (bad, answer.body)
        assert "wire-key-that-must-not-leave" not in server.log.read_text()


def test_secrets_in_subscriptions_and_silences_are_never_stored(tmp_path: Path) -> None:
    """The planted-credential corpus (tests/credentials.py) in every string a subscription or
    a silence stores: name, owner, matcher values, silence reason, silence matchers."""
    env = {"JOBTRAIL_API_TOKENS": TOKENS, "JOBTRAIL_ALERT_HOSTS": "127.0.0.9",
           "JOBTRAIL_ALERTS_INTERVAL_S": "0"}
    placements: list[tuple[str, Any]] = [
        ("subscription.name", lambda s, n: ("sub", {"name": f"s{n} {s}", "owner": "team:x"})),
        ("subscription.owner", lambda s, n: ("sub", {"name": f"o{n}", "owner": f"team:{s}"})),
        ("subscription.matcher", lambda s, n: ("sub", {"name": f"m{n}", "owner": "team:x",
                                                        "matchers": [f"job={s}"]})),
        ("subscription.regex", lambda s, n: ("sub", {"name": f"r{n}", "owner": "team:x",
                                                      "matchers": [f"entity=~{s}"]})),
        ("silence.reason", lambda s, n: ("sil", {"reason": f"rotating {s}",
                                                 "matchers": ["class=network"]})),
        ("silence.matcher", lambda s, n: ("sil", {"reason": "r", "matchers": [f"job={s}"]})),
    ]
    tried: list[CredentialCase] = []
    with serve(tmp_path / "home", env) as server:
        for place, build in placements:
            for n, secret in enumerate(KINDS):
                kind, body = build(secret.value, n)
                if kind == "sub":
                    body["channel"] = {"kind": "slack", "url": "http://127.0.0.9:9/x"}
                    answer = http("POST", f"{server.url}/v1/subscriptions", body,
                                  token="tok-llm")
                else:
                    answer = http("POST", f"{server.url}/v1/silences",
                                  {**body, "for_s": 600}, token="tok-llm")
                assert answer.status in (201, 422), answer.body
                tried.append(CredentialCase(CredentialPlacement(place, lambda s, t: None),
                                            secret))
        shown = json.dumps([http("GET", f"{server.url}/v1/{what}", token=token).body
                            for what in ("subscriptions", "silences")
                            for token in ("tok-llm", "tok-ops")])
    home = tmp_path / "home"
    stored = cli(home, "subscriptions", "--json").stdout + cli(home, "silences").stdout
    leaks = leaked(shown + stored, tried)
    assert len(tried) == len(placements) * len(KINDS)
    assert leaks == [], [c.tag for c in leaks]


def test_the_cli_silence_records_a_redacted_by(tmp_path: Path) -> None:
    home = tmp_path / "home"
    secret = KINDS[2].value
    cli(home, "silence", "class=network", "--for", "1h", "--reason", f"r {secret}",
        "--by", f"ana token={secret}")
    listed = cli(home, "silences").stdout
    assert "active" in listed and secret not in listed


# --- finding 8: follow-ups, link schemes, CLI tracebacks -----------------------------------


def test_followups_list_only_what_the_incident_view_shows(tmp_path: Path) -> None:
    from tests.test_trust import _two_tenants_one_switch

    env = {"JOBTRAIL_API_TOKENS": TOKENS, "JOBTRAIL_TOPOLOGY": TOPOLOGY}
    with serve(tmp_path / "home", env) as server:
        assert http("POST", f"{server.url}/v1/events", jsonl(_two_tenants_one_switch()),
                    token="tok-ops").status == 202
        deadline = time.monotonic() + 60
        while not http("GET", f"{server.url}/v1/incidents", token="tok-ops").body["incidents"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        (full,) = http("GET", f"{server.url}/v1/incidents", token="tok-ops").body["incidents"]
        url = f"{server.url}/v1/incidents/{full['incident_id']}"
        action = {"command": "add_action", "command_id": "a1",
                  "data": {"title": "vision: re-run eval", "owner": "vera"}}
        assert http("POST", f"{url}/commands", action, token="tok-vision").status == 200
        seen = {token: http("GET", f"{server.url}/v1/followups", token=token).body["followups"]
                for token in ("tok-llm", "tok-vision", "tok-ops")}
        shown = http("GET", url, token="tok-llm").body["actions"]
    titles = {token: {r["title"] for r in rows} for token, rows in seen.items()}
    assert "vision: re-run eval" not in titles["tok-llm"]
    assert "vera" not in json.dumps(seen["tok-llm"])
    assert titles["tok-llm"] == {a["title"] for a in shown}  # what the incident view shows
    assert "vision: re-run eval" in titles["tok-vision"] and \
        "vision: re-run eval" in titles["tok-ops"]


LINKS = ["[a](javascript:alert(1))", "[b]( <JavaScript:alert(2)>)", "![c](data:text/html,x)",
         "[d](vbscript:msgbox)", "<javascript:alert(3)>",
         '<a href="java&#115;cript:alert(4)">e</a>',
         "[f](&#x6A;avascript&colon;alert(5))", "[g](jav\tascript:alert(6))",
         "[h]: data:text/html;base64,PHNjcmlwdD4=", "[i](DATA:text/html,x)"]


def test_the_markdown_export_neutralises_script_links() -> None:
    from markdown_it import MarkdownIt

    from jobtrail.views.postmortem import export
    from tests.story_kit import Story
    from tests.test_postmortem import _Tags

    story = Story("ib-flap-64")
    story.do("draft_postmortem")
    text = "\n\n".join([*LINKS, "[ok](https://runbooks.example/leaf) data: 5 TB", "[h]"])
    inc = story.do("edit_postmortem", section="mitigators", text=text)
    markdown = export(inc, "md")
    assert "[ok](https://runbooks.example/leaf) data: 5 TB" in markdown  # prose untouched
    md = MarkdownIt("commonmark")  # a reader that keeps raw HTML and every scheme
    rendered = md.render(markdown)
    hrefs = [t.attrGet("href") or t.attrGet("src") for block in md.parse(markdown)
             for t in (block.children or []) if t.type in ("link_open", "image")]
    assert hrefs and all(str(h).startswith(("https:", "unsafe:")) for h in hrefs), hrefs
    for scheme in ("javascript:", "vbscript:", "data:", "java&#115;cript:"):
        assert f'href="{scheme}' not in rendered.lower()
    page = _Tags()
    page.feed(export(inc, "html"))
    assert page.hrefs and all(h.startswith(("http", "mailto", "#", "/")) for h in page.hrefs)


def test_cli_errors_are_messages_not_tracebacks(tmp_path: Path) -> None:
    home = tmp_path / "home"
    huge = cli(home, "silence", "class=network", "--for", "99999999999h", "--reason", "x",
               check=False)
    assert huge.returncode == 2 and "--for" in huge.stderr and "Traceback" not in huge.stderr
    naive = cli(home, "silence", "class=network", "--until", "2099-01-01T00:00", "--reason",
                "x", check=False)
    assert naive.returncode == 1 and "time zone" in naive.stderr
    assert "Traceback" not in naive.stderr
    for option, value in (("--url", "http://2130706433:8123/"),
                          ("--url", "http://127.0.0.1:1\\@example.com/x"),
                          ("--url-env", "JOBTRAIL_WIRE_KEY")):
        made = cli(home, "subscribe", "x", "--owner", "team:x", "--channel", "slack", option,
                   value, check=False)
        assert made.returncode == 2 and option in made.stderr, made.stderr
        assert "Traceback" not in made.stderr
    scenario = tmp_path / "scenario.yaml"
    for text, says in (("events:\n  - {type: job.started, at: 0s, job: j1}\n", "name: required"),
                       ("- 1\n- 2\n", "a scenario is a mapping"),
                       ("name: x\nevents:\n  - 7\n", "each event is a mapping"),
                       ("name: x\nevents:\n  - {type: job.started}\n", "events[0]"),
                       ("name: [unclosed\n", "not YAML")):
        scenario.write_text(text)
        checked = cli(home, "scenario", "check", str(scenario), check=False)
        assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr
        assert f"FAIL {scenario}: " in checked.stdout and says in checked.stdout, checked.stdout


# --- the dev ClickHouse server is no open database -------------------------------------------


def test_the_dev_clickhouse_server_wants_its_password(clickhouse_server: str) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(clickhouse_server)
    assert parts.username and parts.password and len(parts.password) >= 16
    base = f"http://127.0.0.1:{parts.port}"
    for headers in ({}, {"X-ClickHouse-User": "default"},
                    {"X-ClickHouse-User": parts.username, "X-ClickHouse-Key": "wrong"}):
        request = urllib.request.Request(f"{base}/", data=b"CREATE DATABASE pwned",
                                         method="POST", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403
    assert urllib.request.urlopen(f"{base}/ping", timeout=30).status == 200  # liveness only
    store = Store.connect(clickhouse_server, "t_auth_probe")
    try:
        found = store.client.query("SELECT count() FROM system.databases WHERE name = "
                                   "'pwned'").result_rows
        assert found == [(0,)]
    finally:
        store.client.command("DROP DATABASE IF EXISTS t_auth_probe")
        store.close()


@pytest.fixture
def tls_box(tmp_path: Path) -> Iterator[tuple[str, list[str], list[str], Path]]:
    """An HTTPS receiver on 127.0.0.1 with a certificate for hooks.example only (made by the
    openssl CLI); yields its port, the SNI names and Host headers it saw, and the cert."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("no openssl CLI")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=hooks.example",
                    "-addext", "subjectAltName=DNS:hooks.example"],
                   check=True, capture_output=True, timeout=60)
    names: list[str] = []
    hosts: list[str] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: names.append(str(name)) or None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hosts.append(self.headers.get("Host", ""))
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield str(server.server_address[1]), names, hosts, cert
    finally:
        server.shutdown()
        server.server_close()


def test_https_goes_to_the_checked_address_with_the_name_in_sni_and_host(
        tls_box: tuple[str, list[str], list[str], Path]) -> None:
    import ssl

    port, names, hosts, cert = tls_box
    trust = ssl.create_default_context(cafile=str(cert))
    dns = _resolver({"hooks.example": ["127.0.0.1"], "other.example": ["127.0.0.1"]})
    policy = Policy.from_hosts(["127.0.0.1"])
    answer = egress.post(f"https://hooks.example:{port}/x", b"{}", {}, policy=policy,
                         resolver=dns, tls=trust)
    assert answer.code == 204, answer
    assert names == ["hooks.example"] and hosts == [f"hooks.example:{port}"]
    # the certificate is checked against the name, not the address connected to
    wrong = egress.post(f"https://other.example:{port}/x", b"{}", {}, policy=policy,
                        resolver=dns, tls=trust)
    assert wrong.code == 0 and "certificate" in wrong.error.lower(), wrong
    assert hosts == [f"hooks.example:{port}"]
