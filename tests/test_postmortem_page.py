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
            # the reviewer asks for changes: the page says what, to everyone, and the author
            # asks again
            page.fill("form[data-verb=request-changes] input[name=comment]",
                      "say which cable it was and how old")
            submit("#actions form[data-verb=request-changes]")
            assert page.locator("#pm-status").inner_text() == "draft"
            assert page.locator("#changes-requested").inner_text() == (
                "lead-cy requested changes: “say which cable it was and how old”")
            assert "lead-cy requested changes: “say which cable it was and how old”" in \
                page.locator("main").inner_text()
            shot("changes-requested")
            with page.expect_navigation(timeout=30_000):
                page.click("#logout button")
            sign_in("tok-llm")
            assert page.locator("#changes-requested").count() == 1
            page.fill("form[data-section=contributing] textarea",
                      "The cable at leaf-01/p2 was five years old.")
            submit("form[data-section=contributing]")
            page.fill("input[name=reviewers]", "lead-cy")
            submit("#actions form[data-verb=review]")
            with page.expect_navigation(timeout=30_000):
                page.click("#logout button")
            sign_in("tok-cy")
            page.fill("form[data-verb=approve] input[name=comment]", "clear")
            submit("#actions form[data-verb=approve]")
            assert page.locator("#pm-status").inner_text() == "approved"
            assert page.locator("#approved-by").inner_text() == "lead-cy"
            assert page.locator("#approval").inner_text() == "lead-cy approved: “clear”"
            review = page.locator("main").inner_text()
            assert "lead-cy approved: “clear”" in review
            participants = review.split("Participants")[1].split("Impact")[0]
            assert "lead-cy: reviewer, approver" in participants and "rita: reviewer" in \
                participants
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
            assert page.locator("#reviewers").inner_text() == "lead-cy"
            assert "lead-cy requested changes: “say which cable it was and how old”" in \
                page.locator("main").inner_text()
            markdown = page.request.get(f"{api}?format=md",
                                        headers={"Authorization": "Bearer tok-llm"}).text()
            assert "lead-cy requested changes: “say which cable it was and how old”" in markdown
            assert "lead-cy approved: “clear”" in markdown
            assert page.locator("main").evaluate(
                "m => getComputedStyle(m).backgroundColor") == "rgb(255, 255, 255)"
            assert page.locator("#link-timeline").get_attribute("href") == timeline
            shot("export")
            assert errors == [], errors
        finally:
            browser.close()


def test_the_impact_table_fits_at_1280_and_in_print(tmp_path: Path) -> None:
    """Every table of the page (the Impact table's 14 columns) fits its column at a 1,280 px
    window and on paper (print media at A4's 794 px): no column cut, nothing scrolled
    sideways."""
    from playwright.sync_api import sync_playwright

    home, env, inc = _home(tmp_path)
    shots = _artefacts(tmp_path)
    cli(home, "postmortem", "draft", inc, env={**env, "JOBTRAIL_IDENTITY": "ic-ana"})
    with serve(home, {**env, "JOBTRAIL_API_TOKENS": TOKENS}) as server, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900},
                                    extra_http_headers={"Authorization": "Bearer tok-llm"})
            page.goto(f"{server.url}/incidents/{inc}/postmortem")
            fits = """() => [...document.querySelectorAll('main table')].map(t => {
                const main = document.querySelector('main').getBoundingClientRect();
                const cells = [...t.querySelectorAll('th')];
                return {columns: cells.length, scroll: t.scrollWidth - t.clientWidth,
                        right: Math.max(...cells.map(c => c.getBoundingClientRect().right))
                               - main.right};
            })"""
            for media, width in (("screen", 1280), ("print", 794)):
                page.emulate_media(media=media)
                page.set_viewport_size({"width": width, "height": 900})
                tables = page.evaluate(fits)
                assert max(t["columns"] for t in tables) == 14  # the Impact table is there
                assert all(t["scroll"] <= 0 and t["right"] <= 1 for t in tables), \
                    (media, tables)
                page.screenshot(path=str(shots / f"impact-{media}.png"), full_page=True)
        finally:
            browser.close()
