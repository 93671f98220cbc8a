"""A look at each channel's message, drawn from the JSON jobtrail sends, for screenshots:
Slack's Block Kit (header, sections, fields in two columns, the coloured attachment bar,
buttons, context), a Teams Adaptive Card (containers by style, fact sets, action buttons),
a Mattermost post (Markdown text, the attachment with its colour bar, fields). A mock of
each client's layout, not the client: what is shown is exactly what the JSON says."""

from __future__ import annotations

import html
import re
from typing import Any

CSS = """
body { font: 15px/1.45 -apple-system, 'Segoe UI', system-ui, sans-serif; margin: 0;
  background: #f4f4f5; color: #1d1c1d; }
.frame { max-width: 820px; margin: 16px auto; background: #fff; border: 1px solid #ddd;
  border-radius: 8px; padding: 14px 18px; }
.who { font-weight: 700; } .who small { font-weight: 400; color: #777; margin-left: 6px; }
.push { background: #222; color: #fff; border-radius: 10px; padding: 8px 12px;
  font-size: 13px; margin-bottom: 12px; }
.push b { display: block; font-size: 12px; color: #bbb; }
h3 { margin: 6px 0; font-size: 18px; }
.bar { border-left: 4px solid #ccc; padding: 2px 0 2px 12px; margin: 6px 0; }
.fields { display: grid; grid-template-columns: 1fr 1fr; gap: 6px 18px; margin: 8px 0; }
.btn { display: inline-block; border: 1px solid #bbb; border-radius: 4px; padding: 3px 10px;
  margin: 4px 6px 4px 0; font-weight: 600; font-size: 13px; color: #1d1c1d; }
.btn.primary { background: #007a5a; border-color: #007a5a; color: #fff; }
.btn.positive { background: #2e7d32; border-color: #2e7d32; color: #fff; }
.context { color: #616061; font-size: 12px; }
code { background: #f1f1f1; border: 1px solid #e1e1e1; border-radius: 3px; padding: 0 3px;
  font-size: 12px; }
.card { border: 1px solid #ccc; border-radius: 6px; overflow: hidden; }
.card .c { padding: 8px 14px; } .attention { background: #fbe9e9; }
.warning { background: #fff4e0; } .good { background: #e6f4ea; } .emphasis { background: #f3f3f3; }
.facts td { padding: 1px 12px 1px 0; vertical-align: top; }
.facts td:first-child { font-weight: 600; }
.subtle { color: #666; } .mono { font-family: ui-monospace, monospace; font-size: 13px; }
.teams { font-family: 'Segoe UI', system-ui, sans-serif; }
"""


def _mrkdwn(text: str) -> str:
    """Slack mrkdwn to HTML (what the JSON escaped stays escaped)."""
    out = text  # already &amp; &lt; &gt; escaped by jobtrail
    out = re.sub(r"`([^`]*)`", r"<code>\1</code>", out)
    out = re.sub(r"\*([^*\n]+)\*", r"<b>\1</b>", out)
    return out.replace("\n", "<br>")


def _slack_block(b: dict[str, Any]) -> str:
    kind = b["type"]
    if kind == "header":
        return f"<h3>{html.escape(b['text']['text'])}</h3>"
    if kind == "section":
        out = f"<div>{_mrkdwn(b['text']['text'])}</div>" if "text" in b else ""
        if "fields" in b:
            out += "<div class='fields'>" + "".join(
                f"<div>{_mrkdwn(f['text'])}</div>" for f in b["fields"]) + "</div>"
        return f"<div style='margin:6px 0'>{out}</div>"
    if kind == "actions":
        return "<div>" + "".join(
            f"<span class='btn {html.escape(e.get('style', ''))}'>"
            f"{html.escape(e['text']['text'])}</span>" for e in b["elements"]) + "</div>"
    if kind == "context":
        return "<div class='context'>" + " ".join(_mrkdwn(e["text"]) for e in b["elements"]) \
            + "</div>"
    return ""


def slack(payload: dict[str, Any]) -> str:
    top = "".join(_slack_block(b) for b in payload["blocks"])
    bars = "".join(
        f"<div class='bar' style='border-color:{html.escape(a['color'])}'>"
        + "".join(_slack_block(b) for b in a["blocks"]) + "</div>"
        for a in payload.get("attachments", []))
    return (f"<div class='push'><b>Slack notification</b>{_mrkdwn(payload['text'])}</div>"
            f"<div class='frame'><div class='who'>jobtrail <small>APP 10:11</small></div>"
            f"{top}{bars}</div>")


def _card_text(text: str) -> str:
    plain = re.sub(r"\\(.)", r"\1", text)  # Markdown backslash escapes, as a renderer shows
    return html.escape(plain).replace("\n", "<br>")


def _card_item(item: dict[str, Any]) -> str:
    kind = item["type"]
    if kind == "Container":
        return (f"<div class='c {html.escape(item.get('style', ''))}'>"
                + "".join(_card_item(i) for i in item["items"]) + "</div>")
    if kind == "TextBlock":
        cls = " ".join(c for c, on in (("subtle", item.get("isSubtle")),
                                       ("mono", item.get("fontType") == "Monospace")) if on)
        style = "font-weight:700;" if item.get("weight") == "Bolder" else ""
        style += "font-size:18px;" if item.get("size") == "Medium" else ""
        return (f"<div class='c {cls}' style='{style}'>{_card_text(item['text'])}</div>")
    if kind == "FactSet":
        return ("<div class='c'><table class='facts'>" + "".join(
            f"<tr><td>{_card_text(f['title'])}</td><td>{_card_text(f['value'])}</td></tr>"
            for f in item["facts"]) + "</table></div>")
    return ""


def teams(payload: dict[str, Any]) -> str:
    card = payload["attachments"][0]["content"]
    actions = "".join(f"<span class='btn {html.escape(a.get('style', ''))}'>"
                      f"{html.escape(a['title'])}</span>" for a in card.get("actions", []))
    return (f"<div class='push'><b>Teams notification</b>{html.escape(payload['summary'])}</div>"
            f"<div class='frame teams'><div class='who'>jobtrail (via Workflows) "
            f"<small>10:11</small></div><div class='card'>"
            + "".join(_card_item(i) for i in card["body"])
            + f"<div class='c'>{actions}</div></div></div>")


def _md(text: str) -> str:
    """Mattermost Markdown to HTML: escapes undone, links, bold, code, lists."""
    out = html.escape(re.sub(r"\\(.)", r"\1", text))
    out = re.sub(r"\[([^\]]+)\]\((https?://[^)\s]+)\)", r"<a href='\2'>\1</a>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"`([^`]*)`", r"<code>\1</code>", out)
    out = re.sub(r"(?m)^- ", "• ", out)
    return out.replace("\n", "<br>")


def mattermost(payload: dict[str, Any]) -> str:
    parts = []
    for a in payload["attachments"]:
        fields = "".join(
            f"<div style='grid-column: span {1 if f['short'] else 2}'><b>"
            f"{_md(f['title'])}</b><br>{_md(f['value'])}</div>" for f in a["fields"])
        parts.append(f"<div class='bar' style='border-color:{html.escape(a['color'])}'>"
                     f"<h3><a href='{html.escape(a['title_link'], quote=True)}'>"
                     f"{_md(a['title'])}</a></h3><div>{_md(a['text'])}</div>"
                     f"<div class='fields'>{fields}</div>"
                     f"<div class='context'>{_md(a['footer'])}</div></div>")
    return (f"<div class='push'><b>Mattermost notification</b>{_md(payload['text'])}</div>"
            f"<div class='frame'><div class='who'>{html.escape(payload['username'])} "
            f"<small>BOT 10:11</small></div><div>{_md(payload['text'])}</div>"
            + "".join(parts) + "</div>")


def page(kind: str, payload: dict[str, Any]) -> str:
    body = {"slack": slack, "teams": teams, "mattermost": mattermost}[kind](payload)
    return (f"<!doctype html><html><head><meta charset='utf-8'><style>{CSS}</style></head>"
            f"<body>{body}</body></html>")
