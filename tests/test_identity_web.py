"""Browser credentials over HTTP: the session cookie (its attributes, logout), the CSRF
defence on every state-changing route (finding 7), the trusted auth proxy's header, and
times without a zone (finding 8)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import aiohttp

from jobtrail.config import Settings
from jobtrail.store import Store
from tests.identity_kit import (
    TOKENS,
    backend_with_incident,
    bearer,
    incident_id,
    run,
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
            forged = await client.post(path, json=body, headers={
                "Cookie": cookie, "Origin": base, "X-Jobtrail-CSRF": csrf[:-1] + "A"})
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
                                   data={"token": "tok-viewer", "next": page})
        assert signed.status == 303 and signed.headers["Location"] == page
        evil = await client.post("/ui/login", allow_redirects=False,
                                 data={"token": "tok-viewer", "next": "//evil.example/x"})
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
