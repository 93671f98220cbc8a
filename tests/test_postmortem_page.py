"""The review page through its states in a real headless browser (Debian's chromium through
Playwright): the actions each state offers the viewer, the human sections edited and
amended in the page, the reviewer field, the links, and the HTML export styled the same.
Screenshots of each state go to JOBTRAIL_TEST_ARTEFACTS (CI keeps them), else tmp_path.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from jobtrail.views.postmortem import CSP, EXPORT_CSP, PAGE_CSS, tracker_link
from jobtrail.views.review import actions, section_forms
from tests.test_postmortem_flows import TOKENS, _chromium, _home
from tests.trust_kit import cli, http, serve


def _artefacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("JOBTRAIL_TEST_ARTEFACTS") or tmp_path) / "postmortem-page"
    where.mkdir(parents=True, exist_ok=True)
    return where


def test_a_tracker_url_is_a_link_only_for_http_and_https() -> None:
    assert tracker_link("https://tracker.example/NET-1?a=1&b=2") == (
        '<a href="https://tracker.example/NET-1?a=1&amp;b=2" rel="noopener noreferrer">'
        "https://tracker.example/NET-1?a=1&amp;b=2</a>")
    for hostile in ("javascript:alert(1)", " JavaScript:alert(1)", "data:text/html,x",
                    "https:no-host", '"><script>x</script>'):
        assert "<a" not in tracker_link(hostile) and "<script" not in tracker_link(hostile)


def test_the_page_offers_a_verb_only_to_a_role_that_may_use_it() -> None:
    def verbs(status: str, role: str, author: bool = False) -> list[str]:
        return re.findall(r'<form data-verb="([a-z-]+)"', actions(status, author, ("cy",), role))

    assert verbs("in_review", "commander") == ["approve", "request-changes"]
    assert verbs("in_review", "responder") == []  # approving is a commander's
    assert 'id="no-role"' in actions("in_review", False, ("cy",), "responder")
    assert verbs("approved", "responder") == ["draft"]
    assert verbs("approved", "commander") == ["publish", "draft"]
    assert verbs("draft", "viewer") == []
    assert verbs("draft", "responder") == ["review", "draft"]
    sections = [{"name": "lucky", "title": "Where we got lucky", "text": "t",
                 "provenance": "human"}]
    assert section_forms(sections, "published", "responder") == ""
    assert 'data-verb="amend"' in section_forms(sections, "published", "commander")
    assert 'data-verb="edit"' in section_forms(sections, "draft", "responder")


def test_the_review_page_offers_what_each_state_allows(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    home, env, inc = _home(tmp_path)
    shots = _artefacts(tmp_path)
    ana = {**env, "JOBTRAIL_IDENTITY": "ic-ana"}
    cli(home, "incident", "action", inc, "Audit cable ages", "--owner", "network",
        "--tracker", "https://tracker.example/NET-1", env=ana)

    serving = {**env, "JOBTRAIL_API_TOKENS": TOKENS,
               "JOBTRAIL_GRAFANA_URL": "https://grafana.example"}
    with serve(home, serving) as server, sync_playwright() as p:
        api = f"{server.url}/v1/incidents/{inc}/postmortem"

        def stored() -> Any:  # the postmortem as the API reads it from the log
            return http("GET", api, token="tok-llm").body

        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda m: errors.append(m.text)
                    if "Content Security Policy" in m.text else None)
            url = f"{server.url}/incidents/{inc}/postmortem"

            def sign_in(token: str) -> None:
                page.goto(url)
                page.fill("input[name=token]", token)
                with page.expect_navigation(timeout=30_000):
                    page.click("form button")
                assert page.url == url

            def offered() -> list[str]:
                return sorted(page.locator("#actions button[data-verb]").evaluate_all(
                    "bs => bs.map(b => b.dataset.verb)"))

            def submit(form: str) -> None:
                with page.expect_navigation(timeout=30_000):  # it reloads when done
                    page.click(f"{form} button")

            def shot(name: str) -> None:
                page.screenshot(path=str(shots / f"{name}.png"), full_page=True)

            sign_in("tok-llm")
            assert page.locator("#pm-status").inner_text() == "not_drafted"
            assert offered() == ["draft"]
            assert page.locator("#write form").count() == 0
            # the inline stylesheet applies: the CSP admits it by its hash
            assert page.locator("main").evaluate(
                "m => getComputedStyle(m).backgroundColor") == "rgb(255, 255, 255)"
            shot("not-drafted")
            submit("#actions form[data-verb=draft]")

            assert page.locator("#pm-status").inner_text() == "draft"
            assert offered() == ["draft", "review"]
            assert page.locator("#write form[data-verb=edit]").count() == 5
            timeline = page.locator("#link-timeline").get_attribute("href") or ""
            assert timeline.startswith("https://grafana.example/d/jobtrail-job?")
            assert "&var-attempt=" in timeline and "&from=" in timeline
            assert page.locator("#link-incident").get_attribute("href") == (
                f"/v1/incidents/{inc}")
            assert page.locator("#trackers a").get_attribute("href") == (
                "https://tracker.example/NET-1")
            # every form goes through the page's anti-CSRF token: without it, refused
            bare = page.request.post(f"{api}/edit",
                                     headers={"Origin": server.url},
                                     data={"section": "lucky", "text": "forged"})
            assert bare.status == 403 and "anti-CSRF" in bare.json()["error"]
            page.fill("form[data-section=contributing] textarea", "The cable was old.")
            shot("draft")
            submit("form[data-section=contributing]")
            contributing = next(s for s in stored()["sections"]
                                if s["name"] == "contributing")
            assert contributing["text"] == "The cable was old."
            assert contributing["provenance"] == "human"
            assert page.locator("form[data-section=contributing] textarea").input_value() \
                == "The cable was old."

            page.fill("input[name=reviewers]", "lead-cy, rita")
            submit("#actions form[data-verb=review]")
            assert page.locator("#pm-status").inner_text() == "in_review"
            assert page.locator("#reviewers").inner_text() == "lead-cy, rita"
            assert offered() == ["draft"]  # the author waits for a reviewer
            assert "Waiting for review by lead-cy, rita" in page.locator(
                "#waiting").inner_text()
            shot("in-review-author")
            with page.expect_navigation(timeout=30_000):
                page.click("#logout button")

            sign_in("tok-rita")  # asked to review, but a responder: approving needs a commander
            assert offered() == []
            assert page.locator("#no-role").count() == 1
            shot("in-review-responder")
            with page.expect_navigation(timeout=30_000):
                page.click("#logout button")

            sign_in("tok-cy")
            assert offered() == ["approve", "request-changes"]
            shot("in-review-reviewer")
            page.fill("form[data-verb=approve] input[name=comment]", "clear")
            submit("#actions form[data-verb=approve]")
            assert page.locator("#pm-status").inner_text() == "approved"
            assert page.locator("#approved-by").inner_text() == "lead-cy"
            assert offered() == ["draft", "publish"]
            shot("approved")
            for learning in ("sample", "monitor", "runbook"):
                assert http("POST", f"{api}/learning",
                            {"learning": learning, "reason": "covered by the library"},
                            token="tok-llm").status == 200
            submit("#actions form[data-verb=publish]")

            assert page.locator("#pm-status").inner_text() == "published"
            assert offered() == []
            assert page.locator("#write form[data-verb=edit]").count() == 0
            assert page.locator("#write form[data-verb=amend]").count() == 5
            page.fill("form[data-section=lucky] textarea", "The spare optics were on site.")
            page.fill("form[data-section=lucky] input[name=why]", "the vendor confirmed it")
            shot("published")
            submit("form[data-section=lucky]")
            pm = stored()
            assert [(r["section"], r["why"]) for r in pm["postmortem"]["revisions"]] == [
                ("lucky", "the vendor confirmed it")]
            assert "The spare optics were on site." in page.locator("main").inner_text()
            shot("amended")

            export = tmp_path / "postmortem.html"
            reply = page.request.get(f"{api}?format=html",
                                     headers={"Authorization": "Bearer tok-llm"})
            assert reply.headers["content-security-policy"] == CSP
            text = reply.text()
            export.write_text(text)
            assert f"<style>{PAGE_CSS}</style>" in text and EXPORT_CSP in text
            page.goto(export.as_uri())
            assert page.locator("#reviewers").inner_text() == "lead-cy, rita"
            assert page.locator("main").evaluate(
                "m => getComputedStyle(m).backgroundColor") == "rgb(255, 255, 255)"
            assert page.locator("#link-timeline").get_attribute("href") == timeline
            shot("export")
            assert errors == [], errors
        finally:
            browser.close()
