"""OpenID Connect login against a local issuer started in the test (tests/oidc_issuer.py),
over real HTTP: code + PKCE, the ID token verified against the issuer's JWKS, claims mapped to
a principal; a bad signature, another audience, an expired token, a nonce or a state of
another login are each refused with no session; an answer is used once, across restarts and
processes on one store. And a real browser on the review page: sent
to the issuer, back signed in, signed out."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from jobtrail.config import Settings
from jobtrail.identity.session import Sessions
from jobtrail.store import Store
from tests.identity_kit import (
    backend_with_incident,
    database,
    free_port,
    incident_id,
    on_server,
    run,
    serving,
)
from tests.oidc_issuer import Issuer, start

CLAIMS = {"preferred_username": "grace", "groups": ["network", "platform"],
          "projects": ["llm-pretrain"], "jobtrail_role": ["responder", "commander"]}


def _setup(tmp_path: Path, fault: str = "") -> tuple[Settings, Issuer, int]:
    port, issuer_port = free_port(), free_port()
    app_url = f"http://127.0.0.1:{port}"
    issuer = Issuer(url=f"http://localhost:{issuer_port}", client_id="jobtrail",
                    client_secret="s3cret", redirect_uri=f"{app_url}/auth/callback",
                    claims=dict(CLAIMS), fault=fault)
    settings = Settings.from_env({
        "JOBTRAIL_HOME": str(tmp_path / "home"), "JOBTRAIL_ALERTS_INTERVAL_S": "0",
        "JOBTRAIL_PUBLIC_URL": app_url, "JOBTRAIL_OIDC_ISSUER": issuer.url,
        "JOBTRAIL_OIDC_CLIENT_ID": "jobtrail", "JOBTRAIL_OIDC_CLIENT_SECRET": "s3cret",
        "JOBTRAIL_API_TOKENS": "tok-admin=*,user:ada,role:admin"})
    return settings, issuer, port


async def _answer(client: aiohttp.ClientSession, issuer: Issuer,
                  next_path: str = "/") -> tuple[str, dict[str, str]]:
    """Start a sign-in and have the issuer answer, as a browser would (each redirect and
    cookie by hand): the callback's path and query, and the headers that go with it."""
    started = await client.get(f"/auth/login?next={next_path}", allow_redirects=False)
    assert started.status == 302, await started.text()
    to_issuer = started.headers["Location"]
    assert to_issuer.startswith(f"{issuer.url}/authorize?")
    login = started.cookies["jobtrail_login"]
    assert "samesite=lax" in started.headers["Set-Cookie"].lower()
    async with aiohttp.ClientSession() as browser:
        back = await browser.get(to_issuer, allow_redirects=False)
        assert back.status == 302, await back.text()
        callback = back.headers["Location"]
    path = urlsplit(callback)
    return f"{path.path}?{path.query}", {"Cookie": f"jobtrail_login={login.value}"}


async def _login(client: aiohttp.ClientSession, issuer: Issuer,
                 next_path: str = "/") -> aiohttp.ClientResponse:
    """Sign in as a browser would."""
    callback, headers = await _answer(client, issuer, next_path)
    return await client.get(callback, allow_redirects=False, headers=headers)


def test_an_oidc_login_with_pkce_maps_the_claims_to_a_principal(store: Store,
                                                                tmp_path: Path) -> None:
    settings, issuer, port = _setup(tmp_path)
    backend = backend_with_incident(store, tmp_path / "home")

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        runner = await start(issuer, int(issuer.url.rsplit(":", 1)[1]))
        try:
            done = await _login(client, issuer, "/v1/whoami")
            assert done.status == 200, await done.text()
            assert done.headers["Refresh"] == "0; url=/v1/whoami"
            asked = issuer.authorize_requests[0]
            assert (asked["code_challenge_method"], len(asked["code_challenge"])) == ("S256",
                                                                                     43)
            assert asked["scope"] == "openid profile email" and asked["nonce"]
            assert issuer.token_requests[0]["code_verifier"]  # the issuer checked PKCE
            session = done.cookies["jobtrail_session"]
            assert "samesite=strict" in str(session).lower() and session["httponly"]
            cookie = f"jobtrail_session={session.value}"
            me = await (await client.get("/v1/whoami", headers={"Cookie": cookie})).json()
            assert (me["name"], me["kind"], me["role"], me["teams"], me["projects"]) == (
                "grace", "person", "commander", ["network", "platform"], ["llm-pretrain"])
            assert me["credential"] == f"oidc:{issuer.url}"
            inc = await incident_id(client)
            acked = await client.post(f"/v1/incidents/{inc}/commands", json={
                "command": "ack", "command_id": "oidc-1"}, headers={
                "Cookie": cookie, "Origin": base, "X-Jobtrail-CSRF": me["csrf"]})
            assert acked.status == 200, await acked.text()
            actor = (await acked.json())["events"][0]["actor"]
            assert (actor["name"], actor["credential"]) == ("grace", f"oidc:{issuer.url}")
        finally:
            await runner.cleanup()

    run(settings, backend, scenario, port=port)


@pytest.mark.parametrize(("fault", "why"), [
    ("bad_signature", "the ID token is not valid: InvalidSignatureError"),
    ("wrong_audience", "the ID token is for another client (aud)"),
    ("expired", "the ID token has expired"),
    ("wrong_nonce", "nonce mismatch"),
    ("wrong_state", "state mismatch"),
])
def test_a_forged_or_stale_answer_from_the_issuer_signs_no_one_in(
        store: Store, tmp_path: Path, fault: str, why: str) -> None:
    settings, issuer, port = _setup(tmp_path, fault)
    backend = backend_with_incident(store, tmp_path / "home")

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        runner = await start(issuer, int(issuer.url.rsplit(":", 1)[1]))
        try:
            refused = await _login(client, issuer)
            assert refused.status == 401
            assert why in await refused.text()
            assert "jobtrail_session" not in refused.cookies
            # an answer without the login cookie it belongs to is refused too
            callback = await client.get("/auth/callback?code=x&state=y")
            assert callback.status == 400 and "not started here" in await callback.text()
        finally:
            await runner.cleanup()

    run(settings, backend, scenario, port=port)


def _on_one_store(dsn: str, tmp_path: Path, db: str) -> tuple[Issuer, int, list[Settings]]:
    """An issuer that exchanges a code as often as it is shown one, and two API processes'
    settings on one store (the ClickHouse server at `dsn`, database `db`) with one session
    key, behind one public URL (the first one's port)."""
    port, issuer_port = free_port(), free_port()
    app_url = f"http://127.0.0.1:{port}"
    issuer = Issuer(url=f"http://localhost:{issuer_port}", client_id="jobtrail",
                    client_secret="s3cret", redirect_uri=f"{app_url}/auth/callback",
                    claims=dict(CLAIMS), reuse_codes=True)
    env = {"JOBTRAIL_PUBLIC_URL": app_url, "JOBTRAIL_OIDC_ISSUER": issuer.url,
           "JOBTRAIL_OIDC_CLIENT_ID": "jobtrail", "JOBTRAIL_OIDC_CLIENT_SECRET": "s3cret",
           "JOBTRAIL_SESSION_KEY": "one-key-for-every-api-process", "JOBTRAIL_DATABASE": db}
    return issuer, port, [on_server(dsn, tmp_path / name, **env) for name in ("a", "b")]


def _drop(dsn: str, db: str) -> None:
    store = Store.connect(dsn, db)
    store.client.command(f"DROP DATABASE IF EXISTS {db}")
    store.close()


def test_a_replayed_answer_signs_in_once_here_after_a_restart_and_on_another_server(
        clickhouse_server: str, tmp_path: Path) -> None:
    """Finding 40.5: with an issuer that exchanges a code twice, the same answer (callback URL
    and login cookie) shown again signed in again. A login state is now used once, and that
    use is in the store: the same process, a second one on the store and the first one
    restarted all refuse the replay, before it reaches the issuer."""
    db = database()
    issuer, port, (first, second) = _on_one_store(clickhouse_server, tmp_path, db)
    issuer_port = int(issuer.url.rsplit(":", 1)[1])
    jar = aiohttp.DummyCookieJar

    async def replay(base: str, callback: str, headers: dict[str, str]) -> None:
        async with aiohttp.ClientSession(base, cookie_jar=jar()) as client:
            again = await client.get(callback, allow_redirects=False, headers=headers)
            assert again.status == 401, (base, await again.text())
            assert "this sign-in was already completed" in await again.text()
            assert "jobtrail_session" not in again.cookies

    async def main() -> None:
        runner = await start(issuer, issuer_port)
        try:
            async with serving(first, port=port) as one, serving(second) as two:
                async with aiohttp.ClientSession(one, cookie_jar=jar()) as client:
                    callback, headers = await _answer(client, issuer, "/v1/whoami")
                    done = await client.get(callback, allow_redirects=False, headers=headers)
                    assert done.status == 200, await done.text()
                    cookie = f"jobtrail_session={done.cookies['jobtrail_session'].value}"
                    me = await (await client.get("/v1/whoami",
                                                 headers={"Cookie": cookie})).json()
                    assert (me["name"], me["role"]) == ("grace", "commander")
                await replay(one, callback, headers)  # the same process
                await replay(two, callback, headers)  # another process on the store
            async with serving(first, port=port) as restarted:  # same settings and store
                await replay(restarted, callback, headers)
            assert len(issuer.token_requests) == 1  # no replay reached the issuer
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    finally:
        _drop(clickhouse_server, db)


def test_two_answers_racing_on_one_login_state_sign_in_once(clickhouse_server: str,
                                                            tmp_path: Path) -> None:
    """The same answer shown to two processes on one store at once: one signs in, the other
    is refused (the claim is the store's insert, deduplicated per state)."""
    db = database()
    issuer, port, (first, second) = _on_one_store(clickhouse_server, tmp_path, db)

    async def main() -> None:
        runner = await start(issuer, int(issuer.url.rsplit(":", 1)[1]))
        try:
            async with serving(first, port=port) as one, serving(second) as two, \
                    aiohttp.ClientSession(one, cookie_jar=aiohttp.DummyCookieJar()) as a, \
                    aiohttp.ClientSession(two, cookie_jar=aiohttp.DummyCookieJar()) as b:
                for _ in range(3):
                    callback, headers = await _answer(a, issuer)
                    answers = await asyncio.gather(
                        a.get(callback, allow_redirects=False, headers=headers),
                        b.get(callback, allow_redirects=False, headers=headers))
                    assert sorted(r.status for r in answers) == [200, 401]
                    assert sum("jobtrail_session" in r.cookies for r in answers) == 1
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    finally:
        _drop(clickhouse_server, db)


def test_a_login_state_the_store_never_saw_signs_no_one_in(store: Store,
                                                           tmp_path: Path) -> None:
    """A login cookie sealed with the right key (another deployment's, a stolen key) for a
    state this store never recorded is refused before the code is exchanged."""
    settings, issuer, port = _setup(tmp_path)
    settings = replace(settings, session_key=b"a-key-another-deployment-shares")
    backend = backend_with_incident(store, tmp_path / "home")
    sealed = Sessions(settings.session_key).seal("login", {
        "state": "s-1", "nonce": "n", "verifier": "v" * 43, "next": "/",
        "exp": time.time() + 600})

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        runner = await start(issuer, int(issuer.url.rsplit(":", 1)[1]))
        try:
            answer = await client.get("/auth/callback?code=c-1&state=s-1",
                                      allow_redirects=False,
                                      headers={"Cookie": f"jobtrail_login={sealed}"})
            assert answer.status == 401
            assert "this sign-in is not known here" in await answer.text()
            assert issuer.token_requests == []
        finally:
            await runner.cleanup()

    run(settings, backend, scenario, port=port)


def _chromium() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (scripts/test.sh does, as root)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return path


def test_a_browser_on_the_review_page_signs_in_at_the_issuer_and_out(store: Store,
                                                                     tmp_path: Path) -> None:
    """The page answers a browser that is not signed in with the issuer's login, not JSON;
    back from the issuer (another site: localhost, not 127.0.0.1) the SameSite=Strict
    session holds, and signing out ends it."""
    from playwright.async_api import async_playwright

    settings, issuer, port = _setup(tmp_path)
    backend = backend_with_incident(store, tmp_path / "home")
    executable = _chromium()

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        runner = await start(issuer, int(issuer.url.rsplit(":", 1)[1]))
        try:
            url = f"{base}/incidents/{await incident_id(client)}/postmortem"
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=executable,
                                                  args=["--no-sandbox"])
                try:
                    page = await browser.new_page()
                    await page.goto(url)
                    await page.wait_for_url(url, timeout=30_000)  # issuer, callback, page
                    viewer = await page.locator("#viewer").inner_text()
                    assert viewer == "Signed in as grace (commander)"
                    assert len(issuer.token_requests) == 1
                    cookies: list[Any] = await page.context.cookies(base)
                    (session,) = [c for c in cookies if c["name"] == "jobtrail_session"]
                    assert (session["httpOnly"], session["sameSite"]) == (True, "Strict")
                    async with page.expect_navigation(timeout=30_000):
                        await page.click("#logout button")
                    assert "Signed out" in await page.content()
                    await page.goto(url)  # signed out: off to the issuer again
                    await page.wait_for_url(url, timeout=30_000)
                    assert len(issuer.token_requests) == 2
                finally:
                    await browser.close()
        finally:
            await runner.cleanup()

    run(settings, backend, scenario, port=port)

