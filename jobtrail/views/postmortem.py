"""A postmortem as people read it: folded from the incident's log, exported as Markdown
(canonical), JSON or sanitised HTML, and the page that reviews it.

HTML comes from the Markdown through markdown-it-py's `js-default` preset (raw HTML is text,
unsafe link schemes are refused) and is then cleaned by nh3 (an allow-list sanitiser), so an
event message carrying `<script>` or an `onerror=` attribute is shown, never run. The page
sends a Content-Security-Policy that allows no inline script at all; its one script is a
static file of ours.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import asdict
from datetime import date
from typing import Any

import nh3
from markdown_it import MarkdownIt

from processors.incidents.model import Incident, IncidentEvent, fold
from processors.postmortem import draft
from processors.postmortem.blameless import warnings
from processors.postmortem.checklist import checklist

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
_MD = MarkdownIt("js-default").enable("table")
_TAGS = {"h1", "h2", "h3", "h4", "p", "em", "strong", "code", "pre", "ul", "ol", "li", "table",
         "thead", "tbody", "tr", "th", "td", "a", "blockquote", "hr", "br", "del"}


def _spelled(word: str) -> str:
    """A regex for `word` as a Markdown or HTML reader may decode it: any case, a
    character as an entity (`&#106;`, `&#x6A;`), a backslash escape, and tabs, newlines or
    other control characters in between (browsers drop them from a scheme)."""
    gap = r"(?:[\x00-\x20\\]|&(?:tab|newline);)*"
    parts = []
    for ch in word:
        code = ord(ch.lower())
        alts = [re.escape(ch.lower()), re.escape(ch.upper()), f"&#0*{code};?",
                f"&#[xX]0*{code:x};?", f"&#[xX]0*{code:X};?"]
        parts.append("(?:" + "|".join(alts) + ")")
    return gap.join(parts)


_COLON = r"(?:[\x00-\x20]|&(?:tab|newline);)*(?::|&#0*58;?|&#[xX]0*3[aA];?|&colon;)"
_UNSAFE_LINK = re.compile(
    r"(?P<lead>\]\s*\(\s*<?|^\s{0,3}\[[^\]\n]+\]:\s*<?|<|"
    r"\b(?:href|src|action|formaction|xlink:href|data|poster|background)\s*=\s*[\"']?)"
    r"(?P<scheme>(?:" + "|".join(_spelled(w) for w in ("javascript", "vbscript", "data"))
    + r")" + _COLON + r")", re.MULTILINE)


def neutralise_links(markdown: str) -> str:
    """Make every `javascript:`, `vbscript:` and `data:` link target inert in a Markdown
    export (inline links and images, reference definitions, autolinks, raw HTML
    attributes), however its scheme is spelled: the target is prefixed with `unsafe:`, a
    scheme no reader runs, so the text stays readable and nothing is lost."""
    return _UNSAFE_LINK.sub(lambda m: m["lead"] + "unsafe:" + m["scheme"], markdown)


def state(log: list[IncidentEvent]) -> Incident | None:
    folded = fold(log)
    return next(iter(folded.values()), None)


def to_html(markdown: str) -> str:
    """Markdown -> sanitised HTML (an allow-list of tags; links get rel=noopener)."""
    return nh3.clean(_MD.render(markdown), tags=_TAGS, attributes={"a": {"href", "title"}},
                     url_schemes={"http", "https", "mailto"}, link_rel="noopener noreferrer")


def document(inc: Incident, today: date | None = None) -> dict[str, Any]:
    pm = inc.pm
    return {
        "incident_id": inc.id, "title": inc.title, "severity": inc.severity,
        "incident_status": inc.status, "class": inc.klass, "entity": inc.entity,
        "owner": inc.owner, "commander": inc.commander,
        "postmortem": {"status": pm.status or "not_drafted", "owner": pm.owner, "due": pm.due,
                       "position": pm.position, "template": pm.template,
                       "reviewers": list(pm.reviewers), "approved_by": pm.approved_by,
                       "published_at": pm.published_at, "digest": pm.digest,
                       "waived": pm.waived, "stale": pm.stale,
                       "reviews": [{"kind": k, "by": b, "comment": c}
                                   for k, b, c in pm.reviews],
                       "revision": len(pm.revisions) + 1 if pm.published_at else 0,
                       "revisions": [{"revision": r, "by": b, "at": t, "section": s,
                                      "why": w} for r, b, t, s, w in pm.revisions]},
        "sections": draft.section_texts(inc),
        "checklist": [{**asdict(i), "blocking": i.blocking} for i in checklist(inc, today)],
        "warnings": [asdict(w) for w in warnings(pm, inc.people)],
        "learnings": {k: asdict(v) for k, v in sorted(pm.learnings.items())},
        "followups": [asdict(a) for a in sorted(inc.actions.values(),
                                                key=lambda a: a.action_id)],
        "markdown_digest": draft.digest(inc),
    }


def export(inc: Incident, fmt: str, today: date | None = None) -> str:
    if fmt == "md":
        return neutralise_links(draft.markdown(inc))
    if fmt == "json":
        return json.dumps(document(inc, today), indent=2, sort_keys=True, default=str) + "\n"
    if fmt == "html":
        return standalone_html(inc)
    raise ValueError(f"format must be md, html or json, not {fmt!r}")


def standalone_html(inc: Incident) -> str:
    """A self-contained HTML export (no script), for archiving or mail."""
    title = html.escape(f"Postmortem {inc.id}")
    return (f"<!doctype html><html><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
            f"<title>{title}</title></head><body><main>{to_html(draft.markdown(inc))}</main>"
            f"</body></html>\n")


def page(inc: Incident, today: date | None = None,
         viewer: dict[str, Any] | None = None) -> str:
    """The review page: the rendered postmortem, its checklist and warnings, and buttons that
    call the API (static/postmortem.js; no inline script, the CSP forbids it). `viewer` is
    who is signed in (name, role, the anti-CSRF token the buttons send, whether a session
    can be ended here)."""
    doc = document(inc, today)
    esc = html.escape
    viewer = viewer or {}
    csrf = esc(str(viewer.get("csrf") or ""))
    logout = (f"<form id=\"logout\" method=\"post\" action=\"/auth/logout\">"
              f"<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">"
              "<button>Sign out</button></form>") if viewer.get("session") else ""
    signed_in = (f"<p id=\"viewer\">Signed in as <strong>{esc(str(viewer.get('name')))}"
                 f"</strong> ({esc(str(viewer.get('role')))})</p>{logout}"
                 if viewer.get("name") else "")
    checklist_rows = "".join(
        f"<li class=\"{esc(i['state'].replace('/', ''))}\" data-item=\"{esc(i['name'])}\">"
        f"{esc(i['label'])}: {esc(i['state'])}"
        f"{' (' + esc(i['detail']) + ')' if i['detail'] else ''}</li>"
        for i in doc["checklist"])
    warning_rows = "".join(
        f"<li>{esc(w['section'])}: “{esc(w['found'])}” {esc(w['why'])}</li>"
        for w in doc["warnings"]) or "<li>none</li>"
    status = doc["postmortem"]["status"]
    buttons = "".join(
        f"<button type=\"button\" data-verb=\"{verb}\">{label}</button>"
        for verb, label in (("draft", "Re-draft"), ("review", "Request review"),
                            ("request-changes", "Request changes"), ("approve", "Approve"),
                            ("publish", "Publish")))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Postmortem {esc(inc.id)}</title>
<meta name="jobtrail-csrf" content="{csrf}">
<link rel="stylesheet" href="/ui/postmortem.css">
<script src="/ui/postmortem.js" defer></script>
</head><body data-incident="{esc(inc.id)}">
<header><p>Incident <code>{esc(inc.id)}</code> · {esc(inc.severity)} · incident
{esc(inc.status)} · postmortem <strong id="pm-status">{esc(status)}</strong></p>
{signed_in}
<form id="review"><label>Comment <input name="comment"></label>{buttons}</form>
<p id="outcome" role="status"></p></header>
<aside><h2>Commander checklist</h2><ul id="checklist">{checklist_rows}</ul>
<h2>Blameless check</h2><ul id="warnings">{warning_rows}</ul></aside>
<main id="postmortem">{to_html(draft.markdown(inc))}</main>
</body></html>
"""


PAGE_JS = """// The review buttons: each posts one postmortem command to the API (same origin), as
// the signed-in principal, with the page's anti-CSRF token.
document.addEventListener("DOMContentLoaded", () => {
  const incident = document.body.dataset.incident;
  const csrf = document.querySelector("meta[name=jobtrail-csrf]").content;
  const form = document.getElementById("review");
  const outcome = document.getElementById("outcome");
  for (const button of form.querySelectorAll("button[data-verb]")) {
    button.addEventListener("click", async () => {
      const body = {command_id: "ui-" + crypto.randomUUID()};
      const verb = button.dataset.verb;
      // each verb takes its own fields (an unknown one is refused)
      if (verb === "approve" || verb === "request-changes") {
        body.comment = form.elements.comment.value;
      }
      if (verb === "review") body.reviewers = [];
      const response = await fetch(
        `/v1/incidents/${encodeURIComponent(incident)}/postmortem/${verb}`,
        {method: "POST", headers: {"Content-Type": "application/json",
                                   "X-Jobtrail-CSRF": csrf},
         credentials: "same-origin", body: JSON.stringify(body)});
      const answer = await response.json();
      if (!response.ok) { outcome.textContent = answer.error; return; }
      outcome.textContent = `${verb}: done`;
      document.getElementById("pm-status").textContent = answer.postmortem.status;
      setTimeout(() => window.location.reload(), 200);
    });
  }
});
"""

PAGE_CSS = """body { font-family: system-ui, sans-serif; margin: 1rem 2rem; max-width: 80rem; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: .2rem .4rem; }
aside { float: right; width: 22rem; margin-left: 1rem; font-size: .9rem; }
li.open, li.overdue { color: #a40; } li.done { color: #060; }
"""
