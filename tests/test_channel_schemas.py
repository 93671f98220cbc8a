"""Each channel's rendering against that channel's published schema or limits
(tests/golden/alerts/schemas/SOURCES.md): the Teams card validated with jsonschema against
the Adaptive Card 1.4.0 schema Microsoft publishes (vendored), inside the Workflows `message`
envelope; Slack's Block Kit limits (Slack publishes no JSON Schema: its documented numbers,
as code); Mattermost's documented attachment fields and post length. Every message of the
golden stories is checked, and so is a hostile one built to exceed every limit (a 20,000-
character explanation, 300 jobs, 1,000 nodes, Markdown and mention injection): the class of
defect, not the one input. Screenshots of each channel's message, drawn from its JSON by a
mock of the client (tests/channel_mock.py), go to JOBTRAIL_TEST_ARTEFACTS (else tmp_path).
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from processors.notify import channels
from tests.test_alert_messages import _messages

SCHEMAS = Path(__file__).parent / "golden" / "alerts" / "schemas"
CARD_SCHEMA = json.loads((SCHEMAS / "adaptive-card-1.4.0.json").read_text())

# --- Slack Block Kit (https://api.slack.com/reference/block-kit/blocks) -------------------
SLACK_BLOCKS = {"header": {"type", "text", "block_id"},
                "section": {"type", "text", "fields", "accessory", "block_id"},
                "actions": {"type", "elements", "block_id"},
                "context": {"type", "elements", "block_id"},
                "divider": {"type", "block_id"}}
SLACK_TOP = {"text", "blocks", "attachments", "username", "icon_url", "icon_emoji",
             "unfurl_links", "unfurl_media", "mrkdwn", "thread_ts"}
SLACK_ATTACHMENT = {"color", "fallback", "blocks"}


def slack_problems(payload: dict[str, Any]) -> list[str]:
    """Every way `payload` breaks a Block Kit limit ([] when none)."""
    out: list[str] = []
    if set(payload) - SLACK_TOP:
        out.append(f"unknown top-level keys {sorted(set(payload) - SLACK_TOP)}")
    if not isinstance(payload.get("text"), str) or not payload["text"]:
        out.append("text: the notification fallback is required with blocks")
    elif len(payload["text"]) > 40000:
        out.append("text: more than 40000 characters")
    action_ids: list[str] = []
    groups = [("blocks", payload.get("blocks") or [])]
    for n, attachment in enumerate(payload.get("attachments") or []):
        if extra := sorted(set(attachment) - SLACK_ATTACHMENT):
            out.append(f"attachments[{n}]: unknown keys {extra}")
        if not re.fullmatch(r"#[0-9a-fA-F]{6}", str(attachment.get("color", ""))):
            out.append(f"attachments[{n}].color: not a hex colour")
        groups.append((f"attachments[{n}].blocks", attachment.get("blocks") or []))
    for where, blocks in groups:
        if len(blocks) > 50:
            out.append(f"{where}: {len(blocks)} blocks (at most 50)")
        for i, block in enumerate(blocks):
            at = f"{where}[{i}]"
            kind = block.get("type")
            if kind not in SLACK_BLOCKS:
                out.append(f"{at}: unknown block type {kind!r}")
                continue
            if set(block) - SLACK_BLOCKS[kind]:
                out.append(f"{at}: unknown keys {sorted(set(block) - SLACK_BLOCKS[kind])}")
            out += _slack_block(at, kind, block, action_ids)
    if len(action_ids) != len(set(action_ids)):
        out.append("action_id: not unique in the message")
    return out


def _text(at: str, obj: Any, limit: int, kinds: tuple[str, ...] = ("plain_text", "mrkdwn")
          ) -> list[str]:
    if not isinstance(obj, dict) or obj.get("type") not in kinds:
        return [f"{at}: a text object of type {' or '.join(kinds)}"]
    if not isinstance(obj.get("text"), str) or not obj["text"]:
        return [f"{at}.text: required"]
    return [f"{at}.text: {len(obj['text'])} characters (at most {limit})"] \
        if len(obj["text"]) > limit else []


def _slack_block(at: str, kind: str, block: dict[str, Any], ids: list[str]) -> list[str]:
    out: list[str] = []
    if kind == "header":
        out += _text(f"{at}.text", block.get("text"), 150, ("plain_text",))
    elif kind == "section":
        if "text" not in block and "fields" not in block:
            out.append(f"{at}: text or fields is required")
        if "text" in block:
            out += _text(f"{at}.text", block["text"], 3000)
        fields = block.get("fields") or []
        if len(fields) > 10:
            out.append(f"{at}.fields: {len(fields)} (at most 10)")
        for j, f in enumerate(fields):
            out += _text(f"{at}.fields[{j}]", f, 2000)
    elif kind == "actions":
        elements = block.get("elements") or []
        if not 1 <= len(elements) <= 25:
            out.append(f"{at}.elements: {len(elements)} (1 to 25)")
        for j, e in enumerate(elements):
            where = f"{at}.elements[{j}]"
            if e.get("type") != "button":
                out.append(f"{where}: only link buttons here")
                continue
            out += _text(f"{where}.text", e.get("text"), 75, ("plain_text",))
            if not str(e.get("url", "")).startswith(("https://", "http://")) or \
                    len(e.get("url", "")) > 3000:
                out.append(f"{where}.url: an http(s) URL of at most 3000 characters")
            if "action_id" in e:
                if not 0 < len(e["action_id"]) <= 255:
                    out.append(f"{where}.action_id: 1 to 255 characters")
                ids.append(e["action_id"])
            if e.get("style") not in (None, "primary", "danger"):
                out.append(f"{where}.style: primary or danger")
    elif kind == "context":
        elements = block.get("elements") or []
        if not 1 <= len(elements) <= 10:
            out.append(f"{at}.elements: {len(elements)} (1 to 10)")
        for j, e in enumerate(elements):
            out += _text(f"{at}.elements[{j}]", e, 3000)
    return out


# --- Mattermost (https://developers.mattermost.com/integrate/reference/message-attachments/)
MATTERMOST_TOP = {"text", "channel", "username", "icon_url", "icon_emoji", "attachments",
                  "type", "props"}
MATTERMOST_ATTACHMENT = {"fallback", "color", "pretext", "text", "author_name", "author_link",
                         "author_icon", "title", "title_link", "fields", "image_url",
                         "thumb_url", "footer", "footer_icon", "actions"}
MATTERMOST_POST_MAX = 16383


def mattermost_problems(payload: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if set(payload) - MATTERMOST_TOP:
        out.append(f"unknown keys {sorted(set(payload) - MATTERMOST_TOP)}")
    total = len(payload.get("text") or "")
    for n, a in enumerate(payload.get("attachments") or []):
        if extra := sorted(set(a) - MATTERMOST_ATTACHMENT):
            out.append(f"attachments[{n}]: unknown keys {extra}")
        if not re.fullmatch(r"#[0-9a-fA-F]{6}", str(a.get("color", ""))):
            out.append(f"attachments[{n}].color: not a hex colour")
        if not a.get("fallback"):
            out.append(f"attachments[{n}].fallback: required (plain text for notifications)")
        for j, f in enumerate(a.get("fields") or []):
            if set(f) != {"title", "value", "short"} or not isinstance(f["short"], bool) \
                    or not isinstance(f["title"], str) or not isinstance(f["value"], str):
                out.append(f"attachments[{n}].fields[{j}]: title, value (strings), short (bool)")
        total += sum(len(str(a.get(k) or "")) for k in ("text", "pretext", "title", "footer"))
        total += sum(len(f.get("value", "")) + len(f.get("title", ""))
                     for f in a.get("fields") or [])
    if total > MATTERMOST_POST_MAX:
        out.append(f"{total} characters of text (a post holds {MATTERMOST_POST_MAX})")
    return out


# --- Teams: the Workflows envelope and the Adaptive Card 1.4.0 schema ---------------------


TEAMS_MESSAGE_MAX = 28 * 1024
"""Teams' message size limit for incoming webhooks (28 KB)."""


def teams_problems(payload: dict[str, Any]) -> list[str]:
    out: list[str] = []
    size = len(json.dumps(payload).encode())
    if size > TEAMS_MESSAGE_MAX:
        out.append(f"{size} bytes (a Teams message holds {TEAMS_MESSAGE_MAX})")
    if payload.get("type") != "message":
        out.append("type: message")
    attachments = payload.get("attachments") or []
    if len(attachments) != 1:
        out.append("attachments: one Adaptive Card")
    for n, a in enumerate(attachments):
        if a.get("contentType") != "application/vnd.microsoft.card.adaptive":
            out.append(f"attachments[{n}].contentType: application/vnd.microsoft.card.adaptive")
        card = a.get("content") or {}
        if card.get("version") != "1.4":
            out.append(f"attachments[{n}].content.version: 1.4 (the schema checked)")
        validator = jsonschema.Draft6Validator(CARD_SCHEMA)
        out += [f"attachments[{n}].content.{'.'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(card)]
    return out


CHECKS = {"slack": slack_problems, "teams": teams_problems, "mattermost": mattermost_problems}


def _hostile(msg: dict[str, Any]) -> dict[str, Any]:
    """`msg` with every text at its worst: past every limit, and written to inject."""
    out = copy.deepcopy(msg)
    inc = out["incident"]
    evil = "<!channel> *bold* [link](https://evil.example) <https://evil.example|x> @here "
    inc["cause"]["explanation"] = evil + "x" * 20000
    inc["what"] = evil * 400
    inc["title"] = evil * 10
    out["headline"] = "[sev1] " + evil * 10
    out["push"] = out["headline"] + " — " + "y" * 50000
    inc["owner_why"] = "z" * 5000
    inc["job_impacts"] = [{"job": f"p/job-{n}", "attempt": 1, "role": "failed", "gpus": 8,
                           "failed_at": "2026-11-30T10:11:00+00:00", "failure_step": n,
                           "recovery": "waiting"} for n in range(300)]
    inc["nodes"] = [f"node-{n:04d}" for n in range(1000)]
    inc["actions"] = [{"id": f"a{n}", "title": evil * 20, "status": "proposed",
                       "command": f"jobtrail incident action-accept {inc['id']} a{n}"}
                      for n in range(2)]
    out["links"]["timeline"] = "https://grafana.example/d/x?" + "q" * 4000
    return out


@pytest.mark.parametrize("kind", sorted(CHECKS))
def test_every_message_fits_its_channel_s_schema(kind: str) -> None:
    render = getattr(channels, kind)
    for case, msg in _messages().items():
        assert CHECKS[kind](render(msg)) == [], case
        assert CHECKS[kind](render(_hostile(msg))) == [], f"{case}, hostile"


def test_the_checks_can_fail() -> None:
    """Each check finds a broken rendering (they are not vacuous)."""
    msg = _messages()["severity"]
    slack = channels.slack(msg)
    slack["blocks"][0]["text"]["text"] = "h" * 151
    slack["attachments"][0]["blocks"][0]["fields"] *= 2
    found = slack_problems(slack)
    assert any("at most 150" in p for p in found) and any("at most 10)" in p for p in found)
    card = channels.teams(msg)
    card["attachments"][0]["content"]["body"][0]["style"] = "scarlet"
    card["attachments"][0]["content"]["actions"][0]["colour"] = "red"
    found = teams_problems(card)
    assert any("scarlet" in p for p in found) and any("colour" in p for p in found), found
    post = channels.mattermost(msg)
    post["attachments"][0]["fields"][0]["short"] = "yes"
    post["attachments"][0]["colour"] = "#fff"
    assert len(mattermost_problems(post)) == 2


def test_no_text_becomes_a_link_or_a_mention() -> None:
    """Injected mentions and links stay text in every channel."""
    msg = _hostile(_messages()["severity"])
    payload = channels.slack(msg)
    parsed = [payload["text"]] + [t["text"] for t in _objects(payload)
                                  if t.get("type") == "mrkdwn"]  # plain_text is never parsed
    assert not [t for t in parsed if "<!channel>" in t or "<https://evil" in t]
    card = channels.teams(msg)["attachments"][0]["content"]
    rendered = [card["fallbackText"]] + [  # TextBlocks, facts: Markdown; `summary`: plain
        t for o in _objects(card["body"]) for t in [o["text"]]] + [
        f["value"] for b in card["body"] for f in b.get("facts", [])]
    assert not [t for t in rendered if "[link](https://evil" in t]
    post = channels.mattermost(msg)
    shown = [post["text"]] + [v for a in post["attachments"] for v in (
        a["text"], a["title"], a["footer"], *(f["value"] for f in a["fields"]))]
    assert not [t for t in shown if "[link](https://evil" in t or "@here" in t]


def _objects(value: Any) -> list[dict[str, Any]]:
    """Every dict with a `text` string inside `value` (Slack text objects)."""
    if isinstance(value, dict):
        own = [value] if isinstance(value.get("text"), str) else []
        return own + [o for v in value.values() for o in _objects(v)]
    if isinstance(value, list):
        return [o for v in value for o in _objects(v)]
    return []


def test_slack_s_own_sdk_agrees(tmp_path: Path) -> None:
    """Slack's Python SDK (requirements-dev.lock): its Block Kit models parse every block and
    find nothing to complain about (its validators state the same limits)."""
    from slack_sdk.models import blocks as blocks_module

    for msg in [*_messages().values(), _hostile(_messages()["severity"])]:
        payload = channels.slack(msg)
        for raw in [*payload["blocks"], *(b for a in payload["attachments"]
                                          for b in a["blocks"])]:
            blocks_module.Block.parse(raw).validate_json()


def test_screenshots_of_each_channel(tmp_path: Path) -> None:
    """Each channel's message as its client would lay it out (a mock drawn from the JSON,
    in the real browser): the opened storm, the severity raise and the resolution."""
    from playwright.sync_api import sync_playwright

    from tests.channel_mock import page
    from tests.test_postmortem_flows import _chromium

    shots = Path(os.environ.get("JOBTRAIL_TEST_ARTEFACTS") or tmp_path) / "channels"
    shots.mkdir(parents=True, exist_ok=True)
    msgs = _messages()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            view = browser.new_page(viewport={"width": 900, "height": 700})
            for kind in ("slack", "teams", "mattermost"):
                for case in ("severity", "acknowledged"):
                    html = tmp_path / f"{kind}-{case}.html"
                    html.write_text(page(kind, getattr(channels, kind)(msgs[case])))
                    view.goto(html.as_uri())
                    assert "512 GPUs" in view.inner_text("body")
                    view.screenshot(path=str(shots / f"{kind}-{case}.png"), full_page=True)
        finally:
            browser.close()
