"""OpenID Connect login against a local issuer started in the test (tests/oidc_issuer.py),
over real HTTP: code + PKCE, the ID token verified against the issuer's JWKS, claims mapped to
a principal; a bad signature, another audience, an expired token, a nonce or a state of
another login are each refused with no session. And a real browser on the review page: sent
to the issuer, back signed in, signed out."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from jobtrail.config import Settings
from jobtrail.store import Store
from tests.identity_kit import backend_with_incident, free_port, incident_id, run
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


async def _login(client: aiohttp.ClientSession, issuer: Issuer,
                 next_path: str = "/") -> aiohttp.ClientResponse:
    """Sign in as a browser would (following each redirect by hand, cookies by hand)."""
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
    return await client.get(f"{path.path}?{path.query}", allow_redirects=False,
                            headers={"Cookie": f"jobtrail_login={login.value}"})


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

