"""Each channel's message, built as data from the channel-neutral message.

- webhook: the message as JSON, signed per the Standard Webhooks specification (`webhook-id`
  is the decision id: stable across retries and replays; `webhook-timestamp`;
  `webhook-signature` with one `v1,` signature per active secret while a secret rotates);
- Slack incoming webhook: `text` (the fallback) + Block Kit `blocks`;
- Mattermost incoming webhook: Markdown `text` + a Slack-style attachment with fields;
- Microsoft Teams Workflows: a `message` with an Adaptive Card attachment;
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

from processors.notify.message import acknowledgement, text

COLOURS = {"sev1": "#d32f2f", "sev2": "#f57c00", "sev3": "#fbc02d", "sev4": "#90a4ae"}


def _facts(msg: dict[str, Any]) -> list[tuple[str, str]]:
    inc = msg["incident"]
    impact = inc["impact"]
    cause = inc["cause"]
    return [
        ("Severity", inc["severity"]), ("Status", inc["status"]),
        ("Cause", f"{cause['class'] or inc['class']} on {cause['entity'] or inc['entity']} "
                  f"({cause['confidence']:.2f})"),
        ("Owner", inc["owner"]),
        ("Impact", f"{impact['jobs']} job(s), {impact['gpus']} GPUs, "
                   f"{impact['lost_gpu_hours']} GPU-h lost" if impact.get("assessed", True)
                   else f"{impact['jobs']} job(s), {impact['gpus']} GPUs, at risk "
                        f"{impact.get('at_risk_gpu_hours', 0)} GPU-h (not assessed yet)"),
        ("Recovery", inc.get("recovery_words") or inc["recovery"] or "n/a"),
    ] + ([("Acknowledged", acknowledgement(inc))] if inc.get("acknowledged_by") else [])


def _links(msg: dict[str, Any]) -> list[tuple[str, str]]:
    out = [("Acknowledge", msg["links"]["ack"])] if msg["links"].get("ack") else []
    out.append(("Incident", msg["links"]["incident"]))
    if msg["links"]["timeline"]:
        out.append(("Job timeline", msg["links"]["timeline"]))
    return out


def webhook_body(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, sort_keys=True, separators=(",", ":")).encode()


def sign(msg_id: str, at: datetime, body: bytes, secrets: Sequence[str]) -> dict[str, str]:
    """Standard Webhooks headers; every secret signs (receivers accept any one)."""
    from standardwebhooks import Webhook

    signatures = [Webhook(secret).sign(msg_id, at, body) for secret in secrets]
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": " ".join(signatures)}


def _mrkdwn(value: str) -> str:
    """Slack's three control characters escaped (user text can never become a link)."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack(msg: dict[str, Any]) -> dict[str, Any]:
    inc = msg["incident"]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": msg["headline"][:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _mrkdwn(
            inc["cause"]["explanation"] or inc["title"])[:3000]}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{k}*\n{_mrkdwn(v)}"}
                                       for k, v in _facts(msg)]},
        {"type": "actions", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": label}, "url": url}
            for label, url in _links(msg)]},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": _mrkdwn(
            f"{inc['id']} · {msg['transition']} · jobtrail subscription "
            f"{msg['subscription']['name']}")}]},
    ]
    return {"text": _mrkdwn(msg["headline"]), "blocks": blocks}


def mattermost(msg: dict[str, Any]) -> dict[str, Any]:
    inc = msg["incident"]
    return {
        "username": "jobtrail",
        "text": f"**{_md(msg['headline'])}**",
        "attachments": [{
            "fallback": text(msg), "color": COLOURS.get(inc["severity"], "#90a4ae"),
            "title": _md(inc["title"] or inc["class"]), "title_link": msg["links"]["incident"],
            "text": _md(inc["cause"]["explanation"]),
            "fields": [{"short": True, "title": k, "value": _md(v)} for k, v in _facts(msg)]
            + [{"short": False, "title": label, "value": url} for label, url in _links(msg)],
        }],
    }


def _md(value: str) -> str:
    """Markdown punctuation escaped (Mattermost renders Markdown)."""
    return "".join("\\" + c if c in "\\`*_{}[]<>()#+!|~" else c for c in value)


def teams(msg: dict[str, Any]) -> dict[str, Any]:
    inc = msg["incident"]
    card = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard", "version": "1.4",
        "body": [
            {"type": "TextBlock", "text": msg["headline"], "weight": "Bolder", "size": "Medium",
             "wrap": True},
            {"type": "TextBlock", "text": inc["cause"]["explanation"] or inc["title"],
             "wrap": True},
            {"type": "FactSet", "facts": [{"title": k, "value": v} for k, v in _facts(msg)]},
        ],
        "actions": [{"type": "Action.OpenUrl", "title": label, "url": url}
                    for label, url in _links(msg)],
    }
    return {"type": "message", "attachments": [{
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
                   for k, v in _facts(msg))
    links = " · ".join(f"<a href=\"{esc(url, quote=True)}\">{esc(label)}</a>"
                       for label, url in _links(msg))
    mail.add_alternative(
        f"<!doctype html><html><body><h2>{esc(msg['headline'])}</h2>"
        f"<p>{esc(inc['cause']['explanation'] or inc['title'])}</p><table>{rows}</table>"
        f"<p>{links}</p><p style=\"font-size:small\"><a href=\"{esc(unsubscribe, quote=True)}\">"
        f"Unsubscribe</a></p></body></html>", subtype="html")
    return mail


def render(kind: str, msg: dict[str, Any]) -> bytes:
    """The JSON body of an HTTP channel."""
    if kind == "webhook":
        return webhook_body(msg)
    shaped = {"slack": slack, "mattermost": mattermost, "teams": teams}[kind](msg)
    return json.dumps(shaped, sort_keys=True).encode()
