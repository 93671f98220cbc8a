"""The postmortem's review page: the document with the facts above it, and only the actions
its state allows for the person viewing it.

What the page offers follows `processors.postmortem.state` (the server still decides):
not drafted -> draft; draft -> re-draft, request review (naming the reviewers); in review ->
approve and request changes for anyone but an author (an author waits); approved ->
publish; published -> amend a section, saying why; each only for a role that may use it.
The human sections are forms (edit while a draft, in review or approved; amend once
published). Every form posts through the
one static script, which sends the page's anti-CSRF token; the CSP allows no inline script.
"""

from __future__ import annotations

import html
from datetime import date
from typing import Any

from jobtrail.identity.principal import ROLES
from jobtrail.identity.roles import POSTMORTEM_VERBS, command_role
from jobtrail.views.postmortem import PAGE_CSS, document, facts, to_html
from processors.incidents.model import Incident
from processors.notify.message import Links
from processors.postmortem import draft
from processors.postmortem.state import HUMAN_SECTIONS, PROMPTS

_EDITABLE = ("draft", "in_review", "approved")


def may(role: str, verb: str) -> bool:
    """Whether a viewer of `role` may use `verb` (as `jobtrail.identity.roles` has it); an
    unknown role is offered everything and the server decides."""
    if role not in ROLES:
        return True
    return ROLES.index(role) >= ROLES.index(command_role(POSTMORTEM_VERBS[verb], {}))


def _verb_form(verb: str, label: str, fields: str = "", *, quiet: bool = False,
               section: str = "") -> str:
    where = f" data-section=\"{html.escape(section)}\"" if section else ""
    kind = " class=\"quiet\"" if quiet else ""
    return (f"<form data-verb=\"{verb}\"{where}>{fields}"
            f"<button data-verb=\"{verb}\"{kind}>{html.escape(label)}</button></form>")


def _field(name: str, label: str, *, required: bool = False, value: str = "") -> str:
    need = " required" if required else ""
    return (f"<label>{html.escape(label)} <input name=\"{name}\"{need} "
            f"value=\"{html.escape(value, quote=True)}\"></label>")


def actions(status: str, author: bool, reviewers: tuple[str, ...], role: str = "") -> str:
    """The forms for what the postmortem's state and the viewer's role allow next."""
    offered = _actions(status, author, reviewers, role)
    return offered or "<p id=\"no-role\">Nothing your role may do here now.</p>"


def _actions(status: str, author: bool, reviewers: tuple[str, ...], role: str) -> str:
    def _form(verb: str, label: str, fields: str = "", *, quiet: bool = False) -> str:
        return _verb_form(verb, label, fields, quiet=quiet) if may(role, verb) else ""

    redraft = _form("draft", "Re-draft from the log", quiet=True)
    if status == "":
        return _form("draft", "Draft the postmortem")
    if status == "draft":
        return _form("review", "Request review", _field(
            "reviewers", "Reviewers (names, comma-separated)", required=True,
            value=", ".join(reviewers))) + redraft
    if status == "in_review" and author:
        return (f"<p id=\"waiting\">Waiting for review by "
                f"{html.escape(', '.join(reviewers) or 'a reviewer')}: an author cannot "
                f"approve.</p>{redraft}")
    if status == "in_review":
        return (_form("approve", "Approve", _field("comment", "Comment"))
                + _form("request-changes", "Request changes",
                        _field("comment", "What to change", required=True), quiet=True))
    if status == "approved":
        return _form("publish", "Publish") + redraft
    if status == "published":
        return ("<p>Published" + (": amend a section below, saying why." if may(role, "amend")
                                  else ".") + "</p>")
    return f"<p>Postmortem {html.escape(status)}: nothing to do.</p>"


def section_forms(sections: list[dict[str, Any]], status: str, role: str = "") -> str:
    """A form per human section: edit it (draft, in review, approved) or amend it
    (published, with why), when the viewer's role may."""
    amend = status == "published"
    if status not in (*_EDITABLE, "published") or not may(role, "amend" if amend else "edit"):
        return ""
    out = []
    for s in sections:
        if s["name"] not in HUMAN_SECTIONS:
            continue
        name = str(s["name"])
        written = s["provenance"] != "prompt"
        text = html.escape(str(s["text"])) if written else ""
        box = (f"<label>{html.escape(str(s['title']))}<textarea name=\"text\" required "
               f"placeholder=\"{html.escape(PROMPTS[name], quote=True)}\">{text}"
               "</textarea></label>")
        why = _field("why", "Why amend it", required=True) if amend else ""
        out.append(_verb_form("amend" if amend else "edit", f"Save {s['title']}", box + why,
                         section=name))
    return "<section class=\"card\" id=\"write\"><h2>The human sections</h2>" \
           + "".join(out) + "</section>"


def page(inc: Incident, today: date | None = None, viewer: dict[str, Any] | None = None,
         links: Links | None = None) -> str:
    """The review page. `viewer` is who is signed in (name, role, the anti-CSRF token the
    forms send, whether a session can be ended here)."""
    doc = document(inc, today)
    esc = html.escape
    viewer = viewer or {}
    csrf = esc(str(viewer.get("csrf") or ""))
    logout = (f"<form id=\"logout\" method=\"post\" action=\"/auth/logout\">"
              f"<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">"
              "<button class=\"quiet\">Sign out</button></form>") if viewer.get("session") else ""
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
    pm = inc.pm
    author = str(viewer.get("name") or "") in pm.authors
    role = str(viewer.get("role") or "")
    last = pm.reviews[-1] if pm.reviews else None
    asked = (f"<p id=\"changes-requested\" class=\"open\"><strong>{esc(last[1])}</strong> "
             f"requested changes: “{esc(last[2])}”</p>"
             if last and last[0] == "changes_requested" and pm.status == "draft" else "")
    approved = (f"<p id=\"approval\" class=\"done\"><strong>{esc(last[1])}</strong> "
                f"approved" + (f": “{esc(last[2])}”" if last[2] else "") + "</p>"
                if last and last[0] == "approved" and pm.status == "approved" else "")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Postmortem {esc(inc.id)}</title>
<meta name="jobtrail-csrf" content="{csrf}">
<style>{PAGE_CSS}</style>
<script src="/ui/postmortem.js" defer></script>
</head><body data-incident="{esc(inc.id)}"><div class="page">
<header class="top"><p>Incident <code>{esc(inc.id)}</code> · {esc(inc.severity)} · incident
{esc(inc.status)}</p>{facts(inc, links or Links())}</header>
<main id="postmortem">{to_html(draft.markdown(inc))}</main>
<aside><div class="card" id="actions">{signed_in}<h2>Next</h2>{asked}{approved}
{actions(pm.status, author, pm.reviewers, role)}<p id="outcome" role="status"></p></div>
{section_forms(doc["sections"], pm.status, role)}
<div class="card"><h2>Commander checklist</h2><ul id="checklist">{checklist_rows}</ul></div>
<div class="card"><h2>Blameless check</h2><ul id="warnings">{warning_rows}</ul></div>
</aside></div></body></html>
"""


PAGE_JS = """// Every form on the review page posts one postmortem command to the API (same origin),
// as the signed-in principal, with the page's anti-CSRF token: one handler for all forms,
// so none goes without it.
document.addEventListener("DOMContentLoaded", () => {
  const incident = document.body.dataset.incident;
  const csrf = document.querySelector("meta[name=jobtrail-csrf]").content;
  const outcome = document.getElementById("outcome");
  for (const form of document.querySelectorAll("form[data-verb]")) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const verb = form.dataset.verb;
      const body = {command_id: "ui-" + crypto.randomUUID()};
      if (form.dataset.section) body.section = form.dataset.section;
      for (const field of form.querySelectorAll("input[name], textarea[name]")) {
        body[field.name] = field.name === "reviewers"
          ? field.value.split(",").map((name) => name.trim()).filter(Boolean)
          : field.value;
      }
      const response = await fetch(
        `/v1/incidents/${encodeURIComponent(incident)}/postmortem/${verb}`,
        {method: "POST", headers: {"Content-Type": "application/json",
                                   "X-Jobtrail-CSRF": csrf},
         credentials: "same-origin", body: JSON.stringify(body)});
      const answer = await response.json();
      if (!response.ok) { outcome.textContent = `${verb}: ${answer.error}`; return; }
      window.location.reload();
    });
  }
});
"""
