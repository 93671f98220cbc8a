"""Browser credentials over HTTP: the session cookie (its attributes, logout), the CSRF
defence on every state-changing route (finding 7), the trusted auth proxy's header, and
times without a zone (finding 8); issue 40's finding 5: a logout that holds across restarts
and processes, the site check on every change made with an ambient credential, and the
proxy's identity headers taken only when each appears once."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message
from pathlib import Path
from urllib.parse import unquote

import aiohttp

from jobtrail.config import Settings
from jobtrail.http import create_app
from jobtrail.store import Store
from tests.identity_kit import (
    TOKENS,
    backend_with_incident,
    bearer,
    database,
    incident_id,
    on_server,
    run,
    serving,
    token_session,
)

SILENCE = {"matchers": ["severity=~.*"], "for_s": 60, "reason": "x"}
SUBSCRIPTION = {"name": "csrf", "owner": "team:x",
                "channel": {"kind": "webhook", "url": "https://hooks.example/x"}}


def test_a_cross_site_or_tokenless_form_post_with_the_cookie_changes_nothing(
        store: Store, tmp_path: Path) -> None:
    """Finding 7: a same-site form POST carrying the cookie reopened another project's
    incident, created a silence and a subscription. Now every state-changing route under
    cookie auth needs a same-origin Origin and the page's anti-CSRF token."""
    backend = backend_with_incident(store, tmp_path / "home")

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        inc = await incident_id(client)
        cookie, _, csrf = await token_session(client, "tok-commander")
        commands = f"/v1/incidents/{inc}/commands"
        note = {"command": "note", "command_id": "c1", "data": {"text": "from the page"}}
        sibling = {"Cookie": cookie, "Origin": "http://wiki.127.0.0.1.nip.example"}
        for path, body in ((commands, note), ("/v1/silences", SILENCE),
                           ("/v1/subscriptions", SUBSCRIPTION)):
            # a form on a sibling site: the cookie goes along, the origin is not ours
            form = await client.post(path, data={"command": "reopen"}, headers=sibling)
            assert form.status == 403 and "cross-origin" in (await form.json())["error"]
            # the right origin (or none) without the page's token: still refused
            for origin in ({"Origin": base}, {}):
                bare = await client.post(path, json=body, headers={"Cookie": cookie,
                                                                   **origin})
                assert bare.status == 403, (path, origin)
            # one character other than the token's own (a token ending in "A" was itself
            # once in 64 runs, and passed)
            wrong = csrf[:-1] + ("B" if csrf.endswith("A") else "A")
            forged = await client.post(path, json=body, headers={
                "Cookie": cookie, "Origin": base, "X-Jobtrail-CSRF": wrong})
            assert forged.status == 403
        ok = await client.post(commands, json=note, headers={
            "Cookie": cookie, "Origin": base, "X-Jobtrail-CSRF": csrf})
        assert ok.status == 200, await ok.text()
        # a bearer token is not ambient: no origin, no CSRF token needed
        assert (await client.post(commands, headers=bearer("commander"), json={
            **note, "command_id": "c2"})).status == 200
        # the old cookie carried the raw token and is no credential any more
        old = await client.get("/v1/incidents", headers={"Cookie": "jobtrail_token=tok-admin"})
        assert old.status == 401

    run(Settings(home=tmp_path / "home", api_tokens=TOKENS, alerts_interval_s=0), backend,
        scenario)


def test_the_session_cookie_is_strict_httponly_secure_over_tls_and_logout_ends_it(
        store: Store, tmp_path: Path) -> None:
    backend = backend_with_incident(store, tmp_path / "home")

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        cookie, set_cookie, csrf = await token_session(client, "tok-responder")
        attributes = {a.strip().split("=")[0].lower() for a in set_cookie.split(";")}
        assert {"httponly", "samesite", "path"} <= attributes
        assert "samesite=strict" in set_cookie.lower()
        assert "secure" in attributes  # JOBTRAIL_PUBLIC_URL is https (TLS at the proxy)
        assert "tok-responder" not in set_cookie  # the token never goes into the cookie
        me = await (await client.get("/v1/whoami", headers={"Cookie": cookie})).json()
        assert (me["name"], me["role"]) == ("rita", "responder")
        origin = {"Origin": "https://jobtrail.example"}
        refused = await client.post("/auth/logout", headers={"Cookie": cookie, **origin})
        assert refused.status == 403  # a cross-site page cannot sign you out either
        out = await client.post("/auth/logout", data={"csrf": csrf},
                                headers={"Cookie": cookie, **origin})
        assert out.status == 200
        assert "jobtrail_session=\"\"" in out.headers["Set-Cookie"]
        replayed = await client.get("/v1/whoami", headers={"Cookie": cookie})
        assert replayed.status == 401  # the old cookie, kept by an attacker, is dead
        tampered = cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB")
        assert (await client.get("/v1/whoami", headers={"Cookie": tampered})).status == 401

    run(Settings(home=tmp_path / "home", api_tokens=TOKENS, alerts_interval_s=0,
                 public_url="https://jobtrail.example"), backend, scenario)


def test_a_browser_on_the_review_page_is_sent_to_sign_in(store: Store, tmp_path: Path) -> None:
    backend = backend_with_incident(store, tmp_path / "home")

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        inc = await incident_id(client)
        page = f"/incidents/{inc}/postmortem"
        answer = await client.get(page, allow_redirects=False,
                                  headers={"Accept": "text/html"})
        assert answer.status == 302
        assert unquote(answer.headers["Location"]) == f"/auth/login?next={page}"
        form = await client.get(answer.headers["Location"])
        assert form.status == 200 and "name=\"token\"" in await form.text()
        signed = await client.post("/ui/login", allow_redirects=False,
                                   data={"token": "tok-viewer", "next": page},
                                   headers={"Origin": base})
        assert signed.status == 303 and signed.headers["Location"] == page
        evil = await client.post("/ui/login", allow_redirects=False,
                                 data={"token": "tok-viewer", "next": "//evil.example/x"},
                                 headers={"Origin": base})
        assert evil.headers["Location"] == "/"  # never off-site after sign-in
        cookie = f"jobtrail_session={signed.cookies['jobtrail_session'].value}"
        shown = await client.get(page, headers={"Cookie": cookie})
        text = await shown.text()
        assert shown.status == 200 and "Signed in as <strong>vic</strong> (viewer)" in text
        assert "name=\"jobtrail-csrf\"" in text and "name=\"by\"" not in text

    run(Settings(home=tmp_path / "home", api_tokens=TOKENS, alerts_interval_s=0), backend,
        scenario)


def test_the_auth_proxy_header_is_trusted_only_from_the_proxy(store: Store,
                                                             tmp_path: Path) -> None:
    backend = backend_with_incident(store, tmp_path / "home")
    settings = Settings.from_env({
        "JOBTRAIL_HOME": str(tmp_path / "home"), "JOBTRAIL_ALERTS_INTERVAL_S": "0",
        "JOBTRAIL_AUTH_PROXY_HEADER": "X-WEBAUTH-USER",
        "JOBTRAIL_AUTH_PROXY_ADDRESSES": "127.0.0.2/32",
        "JOBTRAIL_AUTH_PROXY_TEAMS_HEADER": "X-WEBAUTH-GROUPS",
        "JOBTRAIL_AUTH_PROXY_PROJECTS_HEADER": "X-WEBAUTH-PROJECTS",
        "JOBTRAIL_AUTH_PROXY_ROLE_HEADER": "X-WEBAUTH-ROLE"})
    as_proxy = {"X-WEBAUTH-USER": "dana", "X-WEBAUTH-GROUPS": "network, storage",
                "X-WEBAUTH-PROJECTS": "llm-pretrain", "X-WEBAUTH-ROLE": "commander"}

    async def from_proxy(client: aiohttp.ClientSession, base: str) -> None:
        me = await (await client.get("/v1/whoami", headers=as_proxy)).json()
        assert (me["name"], me["role"], me["teams"], me["projects"], me["credential"]) == (
            "dana", "commander", ["network", "storage"], ["llm-pretrain"], "proxy")
        listed = await (await client.get("/v1/incidents", headers=as_proxy)).json()
        (inc,) = listed["incidents"]
        url = f"/v1/incidents/{inc['incident_id']}/commands"
        note = {"command": "note", "command_id": "p1", "data": {"text": "via the proxy"}}
        # the proxy's header rides on the browser's session with the proxy: ambient
        assert (await client.post(url, json=note, headers=as_proxy)).status == 403
        csrf = me["csrf"]
        done = await client.post(url, json=note, headers={
            **as_proxy, "Origin": base, "X-Jobtrail-CSRF": csrf})
        assert done.status == 200, await done.text()
        assert (await done.json())["events"][0]["actor"]["name"] == "dana"
        minimal = await (await client.get("/v1/whoami", headers={
            "X-WEBAUTH-USER": "erin"})).json()
        assert (minimal["role"], minimal["projects"]) == ("viewer", [])  # the default role

        connector = aiohttp.TCPConnector(local_addr=("127.0.0.1", 0))
        async with aiohttp.ClientSession(base, connector=connector) as elsewhere:
            spoofed = await elsewhere.get("/v1/whoami", headers=as_proxy)
            assert spoofed.status == 401
            assert "accepted only from the configured auth proxy" in (await spoofed.json())[
                "error"]
            assert (await elsewhere.get("/v1/incidents")).status == 401

    run(settings, backend, from_proxy, local_addr=("127.0.0.2", 0))


def test_a_time_without_a_zone_is_refused_naming_the_field(store: Store,
                                                          tmp_path: Path) -> None:
    """Finding 8: `since=2026-12-01T00:00:00` was taken as UTC without a word."""
    backend = backend_with_incident(store, tmp_path / "home")

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        naive = await client.get("/v1/incidents?since=2026-12-01T00:00:00",
                                 headers=bearer("viewer"))
        assert naive.status == 400
        assert (await naive.json())["error"].startswith("since: '2026-12-01T00:00:00' has no "
                                                        "time zone")
        timeline = await client.get("/v1/jobs/j/timeline?project=llm-pretrain"
                                    "&until=2026-12-01", headers=bearer("viewer"))
        assert timeline.status == 400 and "until:" in (await timeline.json())["error"]
        for fine in ("2026-12-01T00:00:00Z", "2026-12-01T02:00:00+02:00"):
            answer = await client.get(f"/v1/incidents?since={fine.replace('+', '%2B')}",
                                      headers=bearer("viewer"))
            assert answer.status == 200, fine

    run(Settings(home=tmp_path / "home", api_tokens=TOKENS, alerts_interval_s=0), backend,
        scenario)


# --- issue 40, finding 5: sign-outs that hold, changes that come from this site, one proxy -


def _drop(dsn: str, db: str) -> None:
    store = Store.connect(dsn, db)
    store.client.command(f"DROP DATABASE IF EXISTS {db}")
    store.close()


def test_a_logout_holds_after_a_restart_and_on_another_server(clickhouse_server: str,
                                                              tmp_path: Path) -> None:
    """Finding 40.5: a logged-out cookie was valid again after a restart with the same
    JOBTRAIL_SESSION_KEY (and on any other process). The logout is now in the store: the
    process that took it, another one on the store and the first one restarted refuse the
    cookie; a session that did not log out goes on working on all of them."""
    db = database()
    env = {"JOBTRAIL_API_TOKENS": ";".join(f"{t}={','.join(g)}" for t, g in TOKENS.items()),
           "JOBTRAIL_SESSION_KEY": "one-key-for-every-api-process", "JOBTRAIL_DATABASE": db}
    first, second = (on_server(clickhouse_server, tmp_path / n, **env) for n in ("a", "b"))
    jar = aiohttp.DummyCookieJar

    async def whoami(base: str, cookie: str) -> int:
        async with aiohttp.ClientSession(base, cookie_jar=jar()) as client:
            return (await client.get("/v1/whoami", headers={"Cookie": cookie})).status

    async def main() -> None:
        async with serving(first) as one, serving(second) as two:
            async with aiohttp.ClientSession(one, cookie_jar=jar()) as client:
                cookie, _, csrf = await token_session(client, "tok-responder")
                kept, _, _ = await token_session(client, "tok-responder")
                assert await whoami(two, cookie) == 200  # one key: the other process knows it
                out = await client.post("/auth/logout", data={"csrf": csrf},
                                        headers={"Cookie": cookie, "Origin": one})
                assert out.status == 200, await out.text()
            assert await whoami(one, cookie) == 401
            assert await whoami(two, cookie) == 401  # another process on the store
            assert await whoami(two, kept) == 200
        async with serving(first) as restarted:  # same settings, key and store
            assert await whoami(restarted, cookie) == 401
            assert await whoami(restarted, kept) == 200

    try:
        asyncio.run(main())
    finally:
        _drop(clickhouse_server, db)


def _route_path(template: str) -> str:
    filled = {"name": "postmortem.js", "attempt": "1"}
    return re.sub(r"\{(\w+)(:[^}]*)?\}", lambda m: filled.get(m.group(1), f"x-{m.group(1)}"),
                  template)


def test_every_cookie_authenticated_change_must_come_from_this_site(store: Store,
                                                                    tmp_path: Path) -> None:
    """Finding 40.5: a sign-in POST with only a cross-site Referer (no Origin) was accepted,
    and the links' routes never looked. Every state-changing route of the app (enumerated
    from its router, so a new one cannot skip it), with a signed-in cookie and the page's
    anti-CSRF token, is refused (403, saying why) unless its Origin, or without one its
    Referer, is this site; a bearer token is not ambient and is not asked."""
    backend = backend_with_incident(store, tmp_path / "home")
    settings = Settings(home=tmp_path / "home", api_tokens=TOKENS, alerts_interval_s=0)
    app = create_app(settings, backend=object())
    writes = sorted({(r.method, r.resource.canonical) for r in app.router.routes()  # type: ignore[union-attr]
                     if r.method not in ("GET", "HEAD", "OPTIONS")})
    assert len(writes) >= 20 and ("POST", "/ui/login") in writes
    cross = {"Referer": "https://evil.example/form"}
    tried: dict[str, list[tuple[str, str]]] = {}

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        cookie, _, csrf = await token_session(client, "tok-admin")
        ambient = {"Cookie": cookie, "X-Jobtrail-CSRF": csrf}
        for method, template in writes:
            path = _route_path(template)
            for name, headers in (
                    ("cross-site Referer, no Origin", {**ambient, **cross}),
                    ("neither Origin nor Referer", ambient),
                    ("cross-site Origin, our Referer", {**ambient,
                                                        "Origin": "https://evil.example",
                                                        "Referer": f"{base}/"}),
                    ("sibling-host Origin", {**ambient, "Origin": "http://127.0.0.1.evil"}),
                    ("Origin null, no Referer", {**ambient, "Origin": "null"})):
                answer = await client.request(method, path, json={}, headers=headers)
                error = (await answer.json()).get("error", "")
                assert answer.status == 403 and error.startswith(
                    "cross-origin request refused"), (method, template, name, error)
                tried.setdefault(name, []).append((method, template))
            # this site's page: the origin check passes (what follows is the route's business)
            for ours in ({"Origin": base}, {"Referer": f"{base}/incidents/x/postmortem"}):
                answer = await client.request(method, path, json={},
                                              headers={**ambient, **ours})
                text = await answer.text()
                assert "cross-origin" not in text, (method, template, ours, text)
            # a bearer token is never ambient: no Origin asked, even with the cookie beside it
            # (a sign-in is asked whatever it carries: it makes the cookie)
            answer = await client.request(method, path, json={},
                                          headers={**bearer("admin"), **cross, "Cookie": cookie})
            assert ("cross-origin" in await answer.text()) == (template == "/ui/login"), (
                method, template)
        # a sign-in from another site's form, no cookie at all: refused, and no session
        for headers in (cross, {}):
            signin = await client.post("/ui/login", data={"token": "tok-admin"},
                                       headers=headers, allow_redirects=False)
            assert signin.status == 403 and "jobtrail_session" not in signin.cookies
        same = await client.post("/ui/login", data={"token": "tok-admin"},
                                 headers={"Referer": f"{base}/auth/login"})
        assert same.status == 200 and "jobtrail_session" in same.cookies

    run(settings, backend, scenario)
    assert {name: len(routes) for name, routes in tried.items()} == dict.fromkeys(
        tried, len(writes)) and len(tried) == 5


PROXY_ENV = {"JOBTRAIL_AUTH_PROXY_HEADER": "X-WEBAUTH-USER",
             "JOBTRAIL_AUTH_PROXY_ADDRESSES": "127.0.0.2/32",
             "JOBTRAIL_AUTH_PROXY_TEAMS_HEADER": "X-WEBAUTH-GROUPS",
             "JOBTRAIL_AUTH_PROXY_PROJECTS_HEADER": "X-WEBAUTH-PROJECTS",
             "JOBTRAIL_AUTH_PROXY_ROLE_HEADER": "X-WEBAUTH-ROLE"}


def test_a_repeated_auth_proxy_identity_header_is_refused_naming_it(store: Store,
                                                                   tmp_path: Path) -> None:
    """Finding 40.5: behind a proxy that appends its header to the client's, the client's
    (first) value was taken: `X-WEBAUTH-ROLE: admin` sent by the browser beat the proxy's
    `viewer`. Each identity header (user, teams, projects, role) repeated, in any spelling of
    its name, is now refused (400 naming it), on reads and writes alike."""
    backend = backend_with_incident(store, tmp_path / "home")
    settings = Settings.from_env({"JOBTRAIL_HOME": str(tmp_path / "home"),
                                  "JOBTRAIL_ALERTS_INTERVAL_S": "0", **PROXY_ENV})
    proxy = {"X-WEBAUTH-USER": "dana", "X-WEBAUTH-GROUPS": "network",
             "X-WEBAUTH-PROJECTS": "llm-pretrain", "X-WEBAUTH-ROLE": "viewer"}
    client_copy = {"X-WEBAUTH-USER": "root", "X-WEBAUTH-GROUPS": "platform",
                   "X-WEBAUTH-PROJECTS": "*", "X-WEBAUTH-ROLE": "admin"}
    tried: list[str] = []

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        single = await (await client.get("/v1/whoami", headers=proxy)).json()
        assert (single["name"], single["role"], single["projects"]) == (
            "dana", "viewer", ["llm-pretrain"])
        for header, first in client_copy.items():
            for spelling in (header, header.lower()):
                # the client's copy first, then the proxy's (raw bytes: an HTTP client
                # library folds the spellings of one name together)
                sent = [(k, v) for k, v in proxy.items() if k != header]
                sent += [(spelling, first), (header, proxy[header]), ("Origin", base)]
                for method, path in (("GET", "/v1/whoami"), ("GET", "/v1/incidents"),
                                     ("POST", "/v1/silences")):
                    status, body = await _raw(base, method, path, sent, SILENCE)
                    assert status == 400, (header, spelling, path, status, body)
                    assert body["error"].startswith(f"the {header} header appears 2 times"), \
                        body
                    tried.append(f"{spelling} {method} {path}")
            # a repeated identity header without the user header: refused too, whatever
            # credential would have counted
            status, body = await _raw(base, "GET", "/v1/whoami", [
                ("X-WEBAUTH-ROLE", "admin"), ("X-WEBAUTH-ROLE", "viewer")], {})
            assert status == 400 and "X-WEBAUTH-ROLE header appears 2 times" in str(body)

    run(settings, backend, scenario, local_addr=("127.0.0.2", 0))
    assert len(tried) == 4 * 2 * 3


async def _raw(base: str, method: str, path: str, headers: list[tuple[str, str]],
               body: dict[str, object]) -> tuple[int, dict[str, object]]:
    """One HTTP/1.1 request written byte for byte from 127.0.0.2 (the proxy's address)."""
    port = int(base.rsplit(":", 1)[1])
    payload = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                   local_addr=("127.0.0.2", 0))
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close",
             "Content-Type: application/json", f"Content-Length: {len(payload)}",
             *(f"{k}: {v}" for k, v in headers)]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    head, _, text = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(text)


def _call(method: str, url: str, headers: dict[str, str],
          form: dict[str, str] | None = None) -> tuple[int, Message]:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers


def test_a_logout_holds_across_real_serve_processes(clickhouse_server: str,
                                                    tmp_path: Path) -> None:
    """The same with `jobtrail serve` processes: two on one ClickHouse server with one
    JOBTRAIL_SESSION_KEY; the one that took the logout is killed (SIGKILL) and started
    again on its home."""
    from tests.trust_kit import serve

    db = database()
    env = {"JOBTRAIL_CLICKHOUSE": clickhouse_server, "JOBTRAIL_DATABASE": db,
           "JOBTRAIL_SESSION_KEY": "one-key-for-every-api-process",
           "JOBTRAIL_API_TOKENS": "tok-responder=llm-pretrain,user:rita,role:responder",
           "JOBTRAIL_ALERTS_INTERVAL_S": "0"}
    try:
        with serve(tmp_path / "a", env) as one, serve(tmp_path / "b", env) as two:
            status, headers = _call("POST", f"{one.url}/ui/login", {"Origin": one.url},
                                    {"token": "tok-responder"})
            assert status == 200
            cookie = headers["Set-Cookie"].split(";")[0]
            for server in (one, two):
                assert _call("GET", f"{server.url}/v1/whoami", {"Cookie": cookie})[0] == 200
            with urllib.request.urlopen(urllib.request.Request(
                    f"{one.url}/v1/whoami", headers={"Cookie": cookie}), timeout=60) as me:
                csrf = json.loads(me.read())["csrf"]
            status, _ = _call("POST", f"{one.url}/auth/logout",
                              {"Cookie": cookie, "Origin": one.url}, {"csrf": csrf})
            assert status == 200
            for server in (one, two):
                assert _call("GET", f"{server.url}/v1/whoami", {"Cookie": cookie})[0] == 401
            one.kill()
        with serve(tmp_path / "a", env) as again:
            assert _call("GET", f"{again.url}/v1/whoami", {"Cookie": cookie})[0] == 401
    finally:
        _drop(clickhouse_server, db)


def test_only_routes_that_never_read_the_caller_skip_the_logout_check(store: Store,
                                                                      tmp_path: Path) -> None:
    """`ANONYMOUS_READS` (the probes, metrics, the document, the sign-in pages, the page's
    script) do no store I/O for a cookie: each is a route of the app and answers with no
    credential at all; every other read asks for one (401, or the review page's redirect to
    sign in), or for its link's HMAC (403)."""
    from jobtrail.identity.roles import ANONYMOUS_READS

    backend = backend_with_incident(store, tmp_path / "home")
    settings = Settings(home=tmp_path / "home", api_tokens=TOKENS, alerts_interval_s=0)
    reads = {(r.method, r.resource.canonical)  # type: ignore[union-attr]
             for r in create_app(settings, backend=object()).router.routes()
             if r.method == "GET"}
    assert reads >= ANONYMOUS_READS

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        for method, template in sorted(reads):
            answer = await client.get(_route_path(template), allow_redirects=False, params={
                "project": "llm-pretrain", "at": "2026-12-01T00:00:00Z", "node": "node-001"})
            if (method, template) in ANONYMOUS_READS:
                assert answer.status not in (401, 403), template
            else:
                assert answer.status in (401, 302, 403), (template, answer.status)
                if answer.status == 302:
                    assert answer.headers["Location"].startswith("/auth/login?"), template
                if answer.status == 403:
                    assert "link" in (await answer.json())["error"], template

    run(settings, backend, scenario)
