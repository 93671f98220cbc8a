"""The page an acknowledge link opens: the incident in a few lines, who is signed in, and
one button, or why there is none (already acknowledged: by whom and when; refused: why;
expired). A plain HTML form posts back to the same signed link with the page's anti-CSRF
token; no script. The stylesheet is the postmortem page's (`views.postmortem.CSP` admits
it by its hash)."""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobtrail.views.postmortem import PAGE_CSS


@dataclass(frozen=True)
class AckState:
    """What the page says below the incident."""

    kind: str
    """`offer` (the button), `done` (acknowledged: `by`, `at`), `refused` (`why`),
    `expired`, `queued`."""
    by: str = ""
    at: datetime | None = None
    why: str = ""


def acknowledged(full: dict[str, Any]) -> tuple[str, datetime | None] | None:
    """Who acknowledged the incident and when, from its log (None when nobody has): the
    first `acknowledged` entry, with the time it happened."""
    for entry in full.get("log") or ():
        if entry.get("kind") != "acknowledged":
            continue
        data = entry.get("data") if isinstance(entry.get("data"), dict) else {}
        at = data.get("at") or entry.get("time")
        when = at if isinstance(at, datetime) else _parse(at)
        who = f"{entry.get('actor')}"
        if entry.get("credential"):
            who += f" (via {entry['credential']})"
        return who, when
    if full.get("acknowledged_at"):
        return "someone", full["acknowledged_at"]
    return None


def _parse(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def _when(at: datetime | None) -> str:
    return f"{at:%Y-%m-%d %H:%M:%S} UTC" if at else "an unrecorded time"


def page(full: dict[str, Any], state: AckState, viewer: dict[str, Any],
         links: dict[str, str]) -> str:
    """The page. `viewer`: the signed-in name, role, anti-CSRF token and whether a session
    can be ended here; `links`: `incident` (the API), `dashboard` (Grafana)."""
    esc = html.escape
    inc_id = esc(str(full.get("incident_id")))
    csrf = esc(str(viewer.get("csrf") or ""), quote=True)
    logout = ("<form id=\"logout\" method=\"post\" action=\"/auth/logout\">"
              f"<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">"
              "<button class=\"quiet\">Sign out</button></form>") if viewer.get("session") \
        else ""
    who = esc(str(viewer.get("name") or ""))
    signed = (f"<p id=\"viewer\">Signed in as <strong>{who}</strong> "
              f"({esc(str(viewer.get('role') or ''))})</p>{logout}") if who else ""
    if state.kind == "offer":
        body = ("<form method=\"post\" id=\"ack\">"
                f"<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">"
                f"<button id=\"ack-button\">Acknowledge as {who}</button></form>"
                "<p class=\"hint\">The incident's log records you as acknowledging it: "
                "you are on it. Its reminders stop.</p>")
    elif state.kind == "done":
        body = (f"<p id=\"done\" class=\"done\">Acknowledged by <strong>{esc(state.by)}"
                f"</strong> at {esc(_when(state.at))}.</p>")
    elif state.kind == "queued":
        body = ("<p id=\"queued\">Your acknowledgement is queued; the incident's page shows "
                "it once the worker has applied it.</p>")
    elif state.kind == "expired":
        body = (f"<p id=\"refused\" class=\"open\">This acknowledge link has expired. "
                f"Acknowledge in jobtrail: <code>jobtrail incident ack {inc_id}</code>.</p>")
    else:
        body = f"<p id=\"refused\" class=\"open\">Not acknowledged: {esc(state.why)}.</p>"
    impact = (f"{full.get('impacted_jobs', 0)} job(s), {full.get('impacted_gpus', 0)} GPUs"
              if full.get("impacted_jobs") else "no job hit so far")
    nav = "".join(f"<a id=\"link-{k}\" href=\"{esc(u, quote=True)}\">{esc(label)}</a>"
                  for k, label, u in (("incident", "Incident in jobtrail",
                                       links.get("incident", "")),
                                      ("dashboard", "Incident dashboard",
                                       links.get("dashboard", ""))) if u)
    rows = [("Status", str(full.get("status") or "")),
            ("Severity", f"{full.get('severity')}: {full.get('severity_why') or ''}"),
            ("Owner", f"{full.get('owner')} ({full.get('owner_why') or 'no reason recorded'})"),
            ("Cause", str(full.get("explanation") or full.get("class") or "")),
            ("Impact", impact),
            ("Opened", _when(full.get("opened_at")
                             if isinstance(full.get("opened_at"), datetime)
                             else _parse(full.get("opened_at"))))]
    facts = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Acknowledge {inc_id}</title>
<style>{PAGE_CSS}</style>
</head><body><div class="page single">
<header class="top"><p>Incident <code>{inc_id}</code></p>
<h1 id="title">{esc(str(full.get("title") or full.get("class") or ""))}</h1></header>
<main><dl class="facts">{facts}</dl><nav class="links">{nav}</nav></main>
<aside><div class="card" id="actions">{signed}<h2>Acknowledge</h2>{body}</div></aside>
</div></body></html>
"""
