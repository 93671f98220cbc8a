"""A sev1 postmortem from draft to published through what commanders run: the CLI, the HTTP
API and the review page in a real headless browser (Debian's chromium through Playwright).
The incident is the ib-flap-64 story ingested with `jobtrail ingest` into a fresh home; its
failure sample is replayed by the scenario runner and its monitor checked against it.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobtrail.learn import scenarios
from tests.trust_kit import cli, http, serve

STORY = "ib-flap-64"
GOOD_MONITOR = "signals:\n  - name: ib-port-flap\n    threshold: {count: 1, window_s: 300}\n"
BAD_MONITOR = "signals:\n  - name: ib-port-flap\n    threshold: {count: 9, window_s: 300}\n"
TOKENS = ("tok-llm=llm-pretrain,user:ic-ana,role:commander;"
          "tok-cy=llm-pretrain,user:lead-cy,role:commander;"
          "tok-rita=llm-pretrain,user:rita,role:responder;tok-vision=vision;tok-ops=*")
EVIL = "p2<script>window.pwned=1</script><img src=x onerror=window.pwned=2>"


def _home(tmp: Path, raw: str | None = None) -> tuple[Path, dict[str, str], str]:
    """A home holding the story's events; the env naming its topology; the incident's id."""
    text = raw if raw is not None else (scenarios.LIBRARY / f"{STORY}.yaml").read_text()
    story = scenarios.load_document(yaml.safe_load(text))
    topology = tmp / "topology.yaml"
    topology.write_text(yaml.safe_dump(scenarios.topology(story)))
    events = tmp / "events.jsonl"
    events.write_text("".join(e.model_dump_json(exclude_none=True) + "\n"
                              for e in story.events))
    env = {"JOBTRAIL_TOPOLOGY": str(topology)}
    home = tmp / "home"
    cli(home, "ingest", str(events), env=env)
    listed = [json.loads(line) for line in
              cli(home, "incidents", "--all", "--json", env=env).stdout.splitlines()]
    (incident,) = [i for i in listed if i["class"] == "network"]
    return home, env, incident["incident_id"]


def test_cli_takes_a_sev1_postmortem_from_draft_to_published(tmp_path: Path) -> None:
    home, env, inc = _home(tmp_path)

    def run(*args: str, ok: bool = True) -> Any:
        # the CLI records who runs it: JOBTRAIL_IDENTITY, which `--by` may only repeat
        who = args[args.index("--by") + 1] if "--by" in args else "ic-ana"
        out = cli(home, *args, env={**env, "JOBTRAIL_IDENTITY": who}, check=False)
        assert (out.returncode == 0) == ok, f"{args}: {out.stdout}{out.stderr}"
        return out

    run("postmortem", "draft", inc, "--by", "ic-ana", "--owner", "ic-ana")
    run("postmortem", "edit", inc, "contributing", "--by", "ic-ana", "--text",
        "The cable was past its service life; the on-call should have checked it.")
    shown = run("postmortem", "show", inc).stdout
    assert "postmortem draft, owner ic-ana, due " in shown
    assert "[x] Postmortem drafted" in shown and "[ ] Postmortem published" in shown
    assert "blameless check: contributing: 'should have'" in shown
    assert "## Contributing factors\n\n*human" in shown
    assert "298.7 GPU-hours were lost" in shown

    assert "section must be one of" in run("postmortem", "edit", inc, "nonsense", "--text",
                                           "x", "--by", "ic-ana", ok=False).stderr
    run("postmortem", "review", inc, "--reviewer", "lead-cy", "--by", "ic-ana")
    assert "must not be an author" in run("postmortem", "approve", inc, "--by", "ic-ana",
                                          ok=False).stderr
    run("postmortem", "approve", inc, "--by", "lead-cy", "--comment", "clear")
    refused = run("postmortem", "publish", inc, "--by", "ic-ana", ok=False).stderr
    assert "missing sample, monitor, runbook" in refused

    # the failure sample: cut from the incident's events, replayed by the scenario runner
    sample = tmp_path / "learned" / "sample.yaml"
    made = run("postmortem", "sample", inc, "--out", str(sample), "--by", "ic-ana").stdout
    assert "network on leaf-01/p2 owned by network" in made
    cut = yaml.safe_load(sample.read_text())
    assert cut["expect"]["incidents"][0]["class"] == "network"
    assert cut["expect"]["incidents"][0]["entity"] == "leaf-01/p2"
    assert cut["expect"]["incidents"][0]["lost_gpu_hours"] == pytest.approx(298.666667)
    assert "ok   " in run("scenario", "check", str(sample)).stdout
    # a sample whose expectation the replay does not meet fails the runner
    wrong = tmp_path / "learned" / "wrong.yaml"
    wrong.write_text(sample.read_text().replace("owner: network", "owner: storage"))
    assert "FAIL" in run("scenario", "check", str(wrong), ok=False).stdout

    # the monitor: a rules change, checked by replaying the sample
    bad, good = tmp_path / "bad.yaml", tmp_path / "good.yaml"
    bad.write_text(BAD_MONITOR)
    good.write_text(GOOD_MONITOR)
    assert "opens no earlier" in run("postmortem", "monitor", inc, "--rules", str(bad),
                                     "--by", "ic-ana", ok=False).stderr
    assert "opens the network incident 50 s earlier" in run(
        "postmortem", "monitor", inc, "--rules", str(good), "--by", "ic-ana").stdout
    runbooks = tmp_path / "runbooks"
    run("postmortem", "runbook", inc, "--dir", str(runbooks), "--by", "ic-ana")
    entry = (runbooks / "network.md").read_text()
    assert inc in entry and "leaf-01/p2" in entry

    run("postmortem", "publish", inc, "--by", "ic-ana")
    doc = json.loads(run("postmortem", "export", inc, "--format", "json").stdout)
    assert doc["postmortem"]["status"] == "published"
    assert doc["postmortem"]["approved_by"] == "lead-cy"
    assert sorted(doc["learnings"]) == ["monitor", "runbook", "sample"]
    assert doc["learnings"]["monitor"]["check"].startswith("opens the network incident 50 s")
    assert doc["learnings"]["sample"]["digest"]
    md = run("postmortem", "export", inc).stdout
    assert "- Failure sample: " in md and "to do" not in md.split("## What the cluster")[1]
    out = tmp_path / "pm.html"
    run("postmortem", "export", inc, "--format", "html", "--out", str(out))
    assert "<h2>Impact</h2>" in out.read_text() and "<script" not in out.read_text()

    # follow-ups: kinds, trackers, dates checked; overdue ones per team
    assert "due: 'tomorrow' is not a date" in run(
        "incident", "action", inc, "Replace the optics", "--due", "tomorrow", "--by", "ic-ana",
        ok=False).stderr
    run("incident", "action", inc, "Audit cable ages on every leaf", "--owner", "network",
        "--due", "2026-01-05", "--kind", "prevent", "--priority", "p1", "--tracker",
        "https://tracker.example/NET-1", "--by", "ic-ana")
    proposals = [a["action_id"] for a in doc["followups"] if a["status"] == "proposed"]
    run("incident", "action-accept", inc, proposals[0], "--by", "ic-ana")
    run("incident", "action-update", inc, proposals[1], "--not-doing", "covered by NET-1",
        "--by", "ic-ana")
    overdue = run("followups", "--overdue").stdout
    assert "Audit cable ages" in overdue and "[open]" in overdue
    assert len([line for line in overdue.splitlines() if line.startswith("  ")]) == 1
    mine = [json.loads(line) for line in run("followups", "--team", "network", "--json")
            .stdout.splitlines()]
    assert {r["status"] for r in mine} == {"open", "not_doing"}
    assert {r["owner"] for r in mine} == {"network"}

    # close: the checklist first, or a forced close with its reason
    run("incident", "resolve", inc, "--by", "ic-ana")
    assert "the commander checklist is open" in run("incident", "close", inc, "--by",
                                                    "ic-ana", ok=False).stderr
    assert "give a reason" in run("incident", "close", inc, "--force", "--by", "ic-ana",
                                  ok=False).stderr
    run("incident", "close", inc, "--force", "--reason", "the fabric review owns the rest",
        "--by", "ic-ana")
    log = json.loads(run("incident", "show", inc, "--json").stdout)["log"]
    assert log[-1]["kind"] == "closed" and log[-1]["data"]["reason"].startswith("the fabric")


def test_cli_one_text_verbs_record_their_text(tmp_path: Path) -> None:
    home, env, inc = _home(tmp_path)

    def run(*args: str, who: str = "ic-ana", code: int = 0) -> Any:
        out = cli(home, "postmortem", *args, env={**env, "JOBTRAIL_IDENTITY": who},
                  check=False)
        assert out.returncode == code, f"{args}: {out.stdout}{out.stderr}"
        return out

    run("draft", inc)
    run("review", inc, "--reviewer", "lead-cy")
    assert "--comment" in run("request-changes", inc, who="lead-cy", code=2).stderr
    run("request-changes", inc, "--comment", "say what the cable's age was", who="lead-cy")
    assert "--reason" in run("waive", inc, code=2).stderr
    run("waive", inc, "--reason", "covered by the fabric review")
    pm = json.loads(run("show", inc, "--json").stdout)["postmortem"]
    assert pm["status"] == "waived" and pm["waived"] == "covered by the fabric review"
    last = pm["reviews"][-1]
    assert {k: last[k] for k in ("kind", "by", "comment")} == {
        "kind": "changes_requested", "by": "lead-cy", "comment": "say what the cable's age was"}
    assert last["at"][:2] == "20"  # when it was asked


def _get(url: str, token: str) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        return resp.status, dict(resp.headers), resp.read().decode()


def test_http_takes_a_sev1_postmortem_from_draft_to_published(tmp_path: Path) -> None:
    home, env, inc = _home(tmp_path)
    with serve(home, {**env, "JOBTRAIL_API_TOKENS": TOKENS}) as server:
        base = f"{server.url}/v1/incidents/{inc}/postmortem"

        def post(verb: str, token: str = "tok-llm", **body: Any) -> Any:
            return http("POST", f"{base}/{verb}", body, token=token)

        assert http("GET", base, token="tok-vision").status == 404
        assert post("draft", "tok-vision").status == 404
        drafted = post("draft", owner="ic-ana")
        assert drafted.status == 200, drafted.body
        assert drafted.body["postmortem"]["status"] == "draft"
        assert [e["kind"] for e in drafted.body["events"]] == ["postmortem_drafted"]
        again = post("edit", section="lucky", text="It was a quiet day.",
                     command_id="edit-1")
        assert post("edit", section="lucky", text="It was a quiet day.",
                    command_id="edit-1").body["events"] == []  # a resent command is a no-op
        assert again.status == 200
        assert post("edit", section="lucky").status == 422
        assert post("edit", section="contributing", text="The cable was old.").status == 200
        assert post("review", reviewers=["lead-cy"]).status == 200
        author = post("approve")
        assert author.status == 409 and "must not be an author" in author.body["error"]
        claimed = post("approve", by="lead-cy")  # the author's token writing another name
        assert claimed.status == 422 and "taken from your credential" in claimed.body["error"]
        responder = post("approve", "tok-rita")  # a different principal, not a commander
        assert responder.status == 403 and "needs the commander role" in responder.body["error"]
        approved = post("approve", "tok-cy")
        assert approved.status == 200, approved.body
        assert approved.body["postmortem"]["approved_by"] == "lead-cy"
        assert approved.body["events"][0]["actor"]["credential"].startswith("token:")
        gated = post("publish")
        assert gated.status == 409 and "missing sample, monitor, runbook" in gated.body["error"]
        assert post("learning", learning="runbook").status == 422

        sample = post("sample")
        assert sample.status == 200, sample.body
        recorded = sample.body["learnings"]["sample"]
        assert "network on leaf-01/p2 owned by network" in recorded["check"]
        cut = Path(recorded["path"])
        assert cut.is_relative_to(home) and cut.exists()
        assert "ok   " in cli(home, "scenario", "check", str(cut)).stdout
        worse = post("monitor", rules=BAD_MONITOR)
        assert worse.status == 422 and "opens no earlier" in worse.body["error"]
        assert post("monitor", rules="[not, a, mapping]").status == 422
        monitor = post("monitor", rules=GOOD_MONITOR)
        assert monitor.status == 200, monitor.body
        assert "50 s earlier" in monitor.body["learnings"]["monitor"]["check"]
        assert post("runbook").status == 200
        published = post("publish")
        assert published.status == 200, published.body
        assert published.body["postmortem"]["status"] == "published"
        assert published.body["postmortem"]["digest"]

        status, headers, md = _get(f"{base}?format=md", "tok-llm")
        assert status == 200 and md.startswith("# Postmortem: network on leaf-01/p2")
        assert "It was a quiet day." in md
        status, headers, page = _get(f"{base}?format=html", "tok-ops")
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert "<script" not in page
        followups = http("GET", f"{server.url}/v1/followups?team=network", token="tok-llm")
        assert followups.status == 200 and len(followups.body["followups"]) == 2
        assert http("GET", f"{server.url}/v1/followups?team=network",
                    token="tok-vision").body["followups"] == []


def _chromium() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (scripts/test.sh does, as root)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return path


def test_the_review_page_in_a_real_browser_runs_no_injected_script(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    raw = (scenarios.LIBRARY / f"{STORY}.yaml").read_text().replace("leaf-01/p2",
                                                                    f"leaf-01/{EVIL}")
    home, env, inc = _home(tmp_path, raw)
    ana = {**env, "JOBTRAIL_IDENTITY": "ic-ana"}
    cli(home, "postmortem", "draft", inc, env=ana)
    cli(home, "postmortem", "edit", inc, "went_badly",
        "--text=<script>window.pwned=3</script><img src=x onerror=\"window.pwned=4\"> "
        "[docs](javascript:window.pwned=5) human error", env=ana)
    cli(home, "postmortem", "edit", inc, "contributing",
        "--text", "The cable was past its service life.", env=ana)
    with serve(home, {**env, "JOBTRAIL_API_TOKENS": TOKENS}) as server, \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            url = f"{server.url}/incidents/{inc}/postmortem"

            def sign_in(token: str) -> None:
                # not signed in: the page sends the browser to sign in, not a JSON 401
                assert page.goto(url).status == 200
                assert "/auth/login?next=" in page.url
                page.fill("input[name=token]", token)
                with page.expect_navigation(timeout=30_000):
                    page.click("form button")
                assert page.url == url

            sign_in("tok-llm")
            assert page.locator("#viewer").inner_text() == "Signed in as ic-ana (commander)"
            assert page.evaluate("typeof window.pwned") == "undefined"
            assert page.locator("main#postmortem script, main#postmortem img").count() == 0
            assert "<script>window.pwned=1</script>" in page.locator("h1").inner_text()
            assert page.locator("main#postmortem a[href^='javascript']").count() == 0
            assert page.locator("#pm-status").inner_text() == "draft"
            assert "went_badly: “human error”" in page.locator("#warnings").inner_text()

            def click(verb: str, ok: bool = True) -> str:
                # locator expectations, not wait_for_function: the page's CSP forbids eval
                if not ok:
                    page.click(f"button[data-verb='{verb}']")
                    expect(page.locator("#outcome")).not_to_be_empty(timeout=30_000)
                    return page.locator("#outcome").inner_text()
                with page.expect_navigation(timeout=30_000):  # it reloads when done
                    page.click(f"button[data-verb='{verb}']")
                return page.locator("#pm-status").inner_text()

            page.fill("input[name=reviewers]", "lead-cy")
            assert click("review") == "in_review"
            assert page.locator("button[data-verb='approve']").count() == 0  # an author
            with page.expect_navigation(timeout=30_000):
                page.click("#logout button")
            assert "Signed out" in page.content()
            sign_in("tok-cy")
            assert click("approve") == "approved"
            assert "missing sample, monitor, runbook" in click("publish", ok=False)
            assert page.evaluate("typeof window.pwned") == "undefined"
            assert errors == []
        finally:
            browser.close()
    shown = json.loads(cli(home, "postmortem", "show", inc, "--json", env=env).stdout)
    assert shown["postmortem"]["approved_by"] == "lead-cy"
    assert [r["kind"] for r in shown["postmortem"]["reviews"]] == ["review_requested",
                                                                  "approved"]
