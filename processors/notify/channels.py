"""Each channel's message, built as data from the channel-neutral message.

- webhook: the message as JSON, signed per the Standard Webhooks specification (`webhook-id`
  is the decision id: stable across retries and replays; `webhook-timestamp`;
  `webhook-signature` with one `v1,` signature per active secret while a secret rotates);
- Slack incoming webhook: `text` (the push line) + Block Kit `blocks` and one coloured
  attachment of blocks;
- Mattermost incoming webhook: Markdown `text` (the push line) + a coloured message
  attachment with the story, fields and links;
- Microsoft Teams Workflows: a `message` with an Adaptive Card 1.4 attachment;
- email: text + HTML, threaded per incident, with List-Unsubscribe headers.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

from processors.notify.words import OVER, do_now, do_now_title, facts, links, text

COLOURS = {"sev1": "#d32f2f", "sev2": "#f57c00", "sev3": "#fbc02d", "sev4": "#90a4ae"}
OVER_COLOUR = "#2e7d32"
TEAMS_STYLES = {"sev1": "attention", "sev2": "warning", "sev3": "warning", "sev4": "emphasis"}


def colour(msg: dict[str, Any]) -> str:
    """The severity's colour; green once the impact is over (resolved, recovered,
    mitigated)."""
    if msg["transition"] in OVER:
        return OVER_COLOUR
    return COLOURS.get(msg["incident"]["severity"], "#90a4ae")


def webhook_body(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, sort_keys=True, separators=(",", ":")).encode()


def sign(msg_id: str, at: datetime, body: bytes, secrets: Sequence[str]) -> dict[str, str]:
    """Standard Webhooks headers; every secret signs (receivers accept any one)."""
    from standardwebhooks import Webhook

    signatures = [Webhook(secret).sign(msg_id, at, body) for secret in secrets]
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": " ".join(signatures)}


def _cut(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[:limit - 1] + "…"


def _mrkdwn(value: str) -> str:
    """Slack's three control characters escaped (user text can never become a link)."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(value: str) -> str:
    """A command as inline code (a backtick in it would end the span: dropped)."""
    return "`" + value.replace("`", "") + "`"


def slack(msg: dict[str, Any]) -> dict[str, Any]:
    """Block Kit: `text` is what the phone's notification shows (the push line); `blocks`
    the headline and what happened; one attachment in the severity's colour (Slack's only
    colour bar) carries the facts, the cause, what to do now and the buttons. Within
    Block Kit's limits by construction (header 150, section text 3000, 10 fields of 2000,
    button text 75; tests/test_channel_schemas.py)."""
    inc = msg["incident"]
    top: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _cut(msg["headline"], 150),
                                    "emoji": False}}]
    if inc.get("what"):
        top.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(
            f"*What happened:* {_mrkdwn(inc['what'])}", 3000)}})
    body: list[dict[str, Any]] = [
        {"type": "section", "fields": [{"type": "mrkdwn", "text": _cut(
            f"*{k}*\n{_mrkdwn(v)}", 2000)} for k, v in facts(msg)]}]
    if inc["cause"]["explanation"]:
        body.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(
            f"*Cause:* {_mrkdwn(inc['cause']['explanation'])}", 3000)}})
    todo = do_now(msg)
    if todo:
        body.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(
            f"*{do_now_title(msg)}:*\n" + "\n".join(f"• {_mrkdwn(label)}: {_code(command)}"
                                       for label, command in todo), 3000)}})
    buttons = [{"type": "button", "action_id": f"jobtrail-{n}",
                "text": {"type": "plain_text", "text": _cut(label, 75)}, "url": url}
               | ({"style": "primary"} if label == "Acknowledge" else {})
               for n, (label, url) in enumerate(links(msg)) if len(url) <= 3000]
    if buttons:
        body.append({"type": "actions", "elements": buttons[:25]})
    body.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _mrkdwn(
        f"{inc['id']} · {msg['transition']} · jobtrail subscription "
        f"{msg['subscription']['name']}")}]})
    push = _cut(msg["push"], 3000)
    return {"text": _mrkdwn(push), "blocks": top,
            "attachments": [{"color": colour(msg), "fallback": push, "blocks": body}]}


def mattermost(msg: dict[str, Any]) -> dict[str, Any]:
    """An incoming webhook post: Markdown `text` (the push line: what a phone shows) and one
    message attachment in the severity's colour, with the story as Markdown text, the facts
    as short fields and the links as Markdown links (an incoming webhook's attachment cannot
    carry link buttons)."""
    inc = msg["incident"]
    parts = []
    if inc.get("what"):
        parts.append(f"**What happened:** {_md(inc['what'])}")
    if inc["cause"]["explanation"]:
        parts.append(f"**Cause:** {_md(inc['cause']['explanation'])}")
    todo = do_now(msg)
    if todo:
        lines = []
        for label, command in todo:
            if label == "Acknowledge" and msg["links"].get("ack"):
                lines.append(f"- [Acknowledge]({msg['links']['ack']}) or {_code(command)}")
            else:
                lines.append(f"- {_md(label)}: {_code(command)}")
        parts.append(f"**{do_now_title(msg)}:**\n" + "\n".join(lines))
    parts.append(" · ".join(f"[{label}]({url})" for label, url in links(msg)
                            if label != "Acknowledge"))
    # within one post (MATTERMOST_POST_MAX) however long the texts: 2000 + 8000 + 10 x 500
    return {
        "username": "jobtrail",
        "text": _cut(_md(msg["push"]), 2000),
        "attachments": [{
            "fallback": _cut(msg["push"], 2000), "color": colour(msg),
            "title": _cut(_md(inc["title"] or inc["class"]), 300),
            "title_link": msg["links"]["incident"],
            "text": _cut("\n\n".join(parts), 8000),
            "fields": [{"short": k not in ("Jobs", "Impact", "Cause", "When", "Owner"),
                        "title": k, "value": _cut(_md(v), 500)} for k, v in facts(msg)],
            "footer": _cut(f"{inc['id']} · {msg['transition']} · jobtrail subscription "
                           f"{_md(msg['subscription']['name'])}", 300),
        }],
    }


def _md(value: str) -> str:
    """Markdown punctuation escaped (Mattermost renders Markdown), and `@` kept from
    mentioning anyone (`@here`, `@channel`, a user) by a zero-width space after it."""
    return "".join("\\" + c if c in "\\`*_{}[]<>()#+!|~" else "@\u200b" if c == "@" else c
                   for c in value)


def _card_text(value: str) -> str:
    """Text for an Adaptive Card TextBlock (a Markdown subset): the characters that make a
    link or emphasis escaped, so event text never becomes a link."""
    return "".join("\\" + c if c in "\\`*_[]<>" else c for c in value)


def teams(msg: dict[str, Any]) -> dict[str, Any]:
    """A Teams Workflows message: the `message` envelope with one Adaptive Card 1.4
    attachment (valid against the published schema: tests/test_channel_schemas.py). The
    headline sits in a container styled by severity (green once over), `fallbackText` and
    the envelope's `summary` are the push line."""
    inc = msg["incident"]
    style = "good" if msg["transition"] in OVER else TEAMS_STYLES.get(inc["severity"],
                                                                      "emphasis")
    # within Teams' 28 KB message however long the texts (each cut, the push line twice)
    body: list[dict[str, Any]] = [
        {"type": "Container", "style": style, "bleed": True, "items": [
            {"type": "TextBlock", "text": _card_text(_cut(msg["headline"], 300)),
             "weight": "Bolder", "size": "Medium", "wrap": True}]}]
    if inc.get("what"):
        body.append({"type": "TextBlock", "text": _card_text(_cut(inc["what"], 2000)),
                     "wrap": True})
    body.append({"type": "FactSet", "facts": [{"title": k, "value": _card_text(_cut(v, 500))}
                                              for k, v in facts(msg)]})
    if inc["cause"]["explanation"]:
        body.append({"type": "TextBlock", "wrap": True, "isSubtle": True,
                     "text": _card_text(_cut(inc["cause"]["explanation"], 2000))})
    todo = do_now(msg)
    if todo:
        body.append({"type": "TextBlock", "text": do_now_title(msg), "weight": "Bolder",
                     "spacing": "Medium"})
        body += [{"type": "TextBlock", "text": f"{_card_text(_cut(label, 300))}: {command}",
                  "fontType": "Monospace", "wrap": True, "spacing": "Small"}
                 for label, command in todo]
    push = _cut(msg["push"], 1000)
    card = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard", "version": "1.4", "fallbackText": _card_text(push),
        "body": body,
        "actions": [{"type": "Action.OpenUrl", "title": label, "url": url}
                    | ({"style": "positive"} if label == "Acknowledge" else {})
                    for label, url in links(msg) if len(url) <= 3000],
    }
    return {"type": "message", "summary": push, "attachments": [{
        "contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
        "content": card}]}


def email(msg: dict[str, Any], *, to: str, sender: str, unsubscribe: str,
          at: datetime) -> EmailMessage:
    inc = msg["incident"]
    mail = EmailMessage()
    # one subject per incident: mail clients thread by it as much as by References
    mail["Subject"] = f"[jobtrail] {inc['title'] or inc['class']} ({inc['id']})"
    mail["From"] = sender
    mail["To"] = to
    mail["Date"] = format_datetime(at)
    domain = sender.rsplit("@", 1)[-1] or "jobtrail"
    mail["Message-ID"] = f"<{msg['id']}@{domain}>"  # stable: a retry is the same message
    thread = f"<{inc['id']}@{domain}>"  # every message of an incident in one thread
    mail["In-Reply-To"] = thread
    mail["References"] = thread
    mail["List-Unsubscribe"] = f"<{unsubscribe}>"
    mail["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    mail["X-Jobtrail-Notification"] = msg["id"]
    body = text(msg)
    mail.set_content(body + f"\n\nUnsubscribe: {unsubscribe}\n")
    esc = html.escape
    rows = "".join(f"<tr><th align=\"left\">{esc(k)}</th><td>{esc(v)}</td></tr>"
                   for k, v in facts(msg))
    buttons = " · ".join(f"<a href=\"{esc(url, quote=True)}\">{esc(label)}</a>"
                         for label, url in links(msg))
    todo = "".join(f"<li>{esc(label)}: <code>{esc(command)}</code></li>"
                   for label, command in do_now(msg))
    bar = colour(msg)
    mail.add_alternative(
        f"<!doctype html><html><body><h2 style=\"border-left:6px solid {bar};"
        f"padding-left:8px\">{esc(msg['headline'])}</h2>"
        + (f"<p><strong>What happened:</strong> {esc(inc['what'])}</p>" if inc.get("what")
           else "")
        + f"<table>{rows}</table>"
        + (f"<p>{esc(inc['cause']['explanation'])}</p>" if inc["cause"]["explanation"]
           else "")
        + (f"<p><strong>{do_now_title(msg)}:</strong></p><ul>{todo}</ul>" if todo else "")
        + f"<p>{buttons}</p><p style=\"font-size:small\"><a href=\""
        f"{esc(unsubscribe, quote=True)}\">Unsubscribe</a></p></body></html>", subtype="html")
    return mail


def render(kind: str, msg: dict[str, Any]) -> bytes:
    """The JSON body of an HTTP channel."""
    if kind == "webhook":
        return webhook_body(msg)
    shaped = {"slack": slack, "mattermost": mattermost, "teams": teams}[kind](msg)
    return json.dumps(shaped, sort_keys=True).encode()
