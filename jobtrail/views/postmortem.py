"""A postmortem as people read it: folded from the incident's log, exported as Markdown
(canonical), JSON or sanitised HTML, and the page that reviews it.

HTML comes from the Markdown through markdown-it-py's `js-default` preset (raw HTML is text,
unsafe link schemes are refused) and is then cleaned by nh3 (an allow-list sanitiser), so an
event message carrying `<script>` or an `onerror=` attribute is shown, never run. The page
sends a Content-Security-Policy that allows no inline script at all; its one script is a
static file of ours.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from dataclasses import asdict
from datetime import date
from typing import Any
from urllib.parse import quote, urlsplit

import nh3
from markdown_it import MarkdownIt

from processors.incidents.model import Incident, IncidentEvent, fold
from processors.notify.message import Links, incident_dashboard, job_timeline
from processors.postmortem import draft
from processors.postmortem.blameless import warnings
from processors.postmortem.checklist import checklist

PAGE_CSS = """
body { font: 15px/1.5 system-ui, sans-serif; color: #1d2329; background: #f5f6f8; margin: 0; }
a { color: #0b5cad; } code { font: .9em ui-monospace, monospace; background: #eceff3;
  padding: 0 .2em; border-radius: 3px; }
.page { display: grid; grid-template-columns: minmax(0, 1fr) 18rem; gap: 1.25rem;
  max-width: 80rem; margin: 0 auto; padding: 1rem 1.5rem; }
.page.export { grid-template-columns: minmax(0, 1fr); max-width: 58rem; }
header.top, main, .card { background: #fff; border: 1px solid #d8dde2; border-radius: 6px;
  padding: .75rem 1.25rem; }
header.top { grid-column: 1 / -1; } header.top p { margin: .2rem 0; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .1rem 1rem;
  margin: .5rem 0; } dl.facts dt { color: #5b6670; } dl.facts dd { margin: 0; }
nav.links a { margin-right: 1.25rem; }
main h1 { font-size: 1.5rem; margin-top: .25rem; }
main h2 { font-size: 1.15rem; border-bottom: 1px solid #d8dde2; margin-top: 1.6rem; }
main { min-width: 0; }
table { border-collapse: collapse; font-size: .78rem; width: 100%; }
td, th { border: 1px solid #d8dde2; padding: .2rem .35rem; text-align: left;
  vertical-align: top; } th { font-weight: 600; font-size: .74rem; }
td code { overflow-wrap: anywhere; }
aside .card { margin-bottom: 1rem; } aside h2 { font-size: 1rem; margin: .2rem 0 .4rem; }
aside ul { padding-left: 1.1rem; margin: 0; }
li.open, li.overdue, li.missing { color: #a04000; } li.done { color: #17692f; }
form { margin: .5rem 0; } label { display: block; font-size: .85rem; color: #5b6670; }
input, textarea { font: inherit; width: 100%; box-sizing: border-box; padding: .3rem .4rem;
  border: 1px solid #c3cad1; border-radius: 4px; } textarea { min-height: 5.5rem; }
button { font: inherit; margin-top: .3rem; padding: .3rem .9rem; border-radius: 4px;
  border: 1px solid #0b5cad; background: #0b5cad; color: #fff; cursor: pointer; }
button.quiet { background: #fff; color: #0b5cad; }
#outcome { color: #a04000; font-weight: 600; } #outcome:empty { display: none; }
@media (max-width: 60rem) { .page { grid-template-columns: minmax(0, 1fr); } }
p.open { color: #a04000; } p.done { color: #17692f; }
@media print { aside, form { display: none; } body { background: #fff; }
  .page { display: block; max-width: none; padding: 0; }
  header.top, main { border: 0; padding: 0; }
  table { font-size: 7.5pt; } td, th { padding: .05rem .15rem; } }
"""
"""One stylesheet for the review page and the HTML export, inlined in both (no external
asset); the CSP admits exactly this text by its hash."""
_STYLE = base64.b64encode(hashlib.sha256(PAGE_CSS.encode()).digest()).decode()
CSP = ("default-src 'none'; script-src 'self'; "
       f"style-src 'sha256-{_STYLE}'; connect-src 'self'; "
       "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
EXPORT_CSP = CSP.removesuffix("; frame-ancestors 'none'")
"""The export's, in a <meta> element (where browsers ignore frame-ancestors)."""
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


_CODE = re.compile(r"(?ms)^ {0,3}(```|~~~).*?^ {0,3}\1|`[^`\n]*`")
_RAW_HTML = re.compile(r"(?<!\\)<(?=/?[A-Za-z][A-Za-z0-9-]*(?:[\s/>]|$)|[!?])")


def neutralise_html(markdown: str) -> str:
    """Escape raw HTML in a Markdown export (`<script>`, `<iframe ...>`, `<!-- -->`, closing
    tags): a person's section is Markdown, and a renderer that allows HTML (many wikis and
    portals) would run a tag as written. `<` becomes `\\<`, which CommonMark shows as `<`;
    code spans and fenced blocks are left as written, and so are autolinks (`<https://...>`,
    made inert by `neutralise_links` when their scheme runs code)."""
    out, at = [], 0
    for code in _CODE.finditer(markdown):
        out.append(_RAW_HTML.sub(r"\\<", markdown[at:code.start()]))
        out.append(code.group())
        at = code.end()
    out.append(_RAW_HTML.sub(r"\\<", markdown[at:]))
    return "".join(out)


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
                       "reviews": [{"kind": k, "by": b, "comment": c, "at": t}
                                   for k, b, c, t in pm.reviews],
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


def export(inc: Incident, fmt: str, today: date | None = None,
           links: Links | None = None) -> str:
    if fmt == "md":
        return neutralise_links(neutralise_html(draft.markdown(inc)))
    if fmt == "json":
        return json.dumps(document(inc, today), indent=2, sort_keys=True, default=str) + "\n"
    if fmt == "html":
        return standalone_html(inc, links or Links())
    raise ValueError(f"format must be md, html or json, not {fmt!r}")


def tracker_link(url: str) -> str:
    """A follow-up's tracker URL as HTML: a link only for an http(s) URL with a host (the
    URL is the tenant's text), escaped text otherwise."""
    parts = urlsplit(url.strip())
    shown = html.escape(url)
    if parts.scheme.lower() in ("http", "https") and parts.netloc:
        return (f"<a href=\"{html.escape(url.strip(), quote=True)}\" "
                f"rel=\"noopener noreferrer\">{shown}</a>")
    return shown


def facts(inc: Incident, links: Links) -> str:
    """The block above the document on the page and in the export: the postmortem's state,
    who is asked to review and who approved, the links (the incident, its dashboard, the
    failed job's timeline at the incident's range and attempt) and the follow-ups'
    trackers."""
    esc = html.escape
    pm = inc.pm
    job = next((j for j in sorted(inc.jobs.values(), key=lambda j: j.key)
                if j.role == "failed"), None) or next(
        (j for j in sorted(inc.jobs.values(), key=lambda j: j.key)), None)
    until = inc.resolved_at or inc.mitigated_at or inc.last_signal_at or inc.opened_at
    timeline = job_timeline(links.grafana, inc, job, until)
    nav = [("link-incident", f"{links.api}/v1/incidents/{quote(inc.id)}",
            "Incident in jobtrail"),
           ("link-dashboard", incident_dashboard(links.grafana, inc), "Incident dashboard")]
    if job is not None:
        nav.append(("link-timeline", timeline,
                    f"Job timeline: {job.job_id} attempt {job.attempt}"))
    trackers = "".join(
        f"<li><code>{esc(a.action_id)}</code> {esc(a.title)}: {tracker_link(a.tracker)}</li>"
        for a in sorted(inc.actions.values(), key=lambda a: a.action_id) if a.tracker)
    return (f"<dl class=\"facts\"><dt>Postmortem</dt><dd id=\"pm-status\">"
            f"{esc(pm.status or 'not_drafted')}</dd>"
            f"<dt>Owner</dt><dd>{esc(pm.owner or 'not named')}</dd>"
            f"<dt>Review asked of</dt><dd id=\"reviewers\">"
            f"{esc(', '.join(pm.reviewers)) or 'nobody yet'}</dd>"
            f"<dt>Approved by</dt><dd id=\"approved-by\">{esc(pm.approved_by or 'not yet')}"
            "</dd></dl><nav class=\"links\">"
            + "".join(f"<a id=\"{i}\" href=\"{esc(u, quote=True)}\">{esc(t)}</a>"
                      for i, u, t in nav)
            + "</nav>"
            + (f"<p>Trackers:</p><ul id=\"trackers\">{trackers}</ul>" if trackers else ""))


def standalone_html(inc: Incident, links: Links) -> str:
    """A self-contained HTML export (no script, the page's stylesheet inlined), for
    archiving or mail."""
    title = html.escape(f"Postmortem {inc.id}")
    return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{EXPORT_CSP}\">"
            f"<title>{title}</title><style>{PAGE_CSS}</style></head><body>"
            f"<div class=\"page export\"><header class=\"top\">{facts(inc, links)}</header>"
            f"<main id=\"postmortem\">{to_html(draft.markdown(inc))}</main></div>"
            f"</body></html>\n")
