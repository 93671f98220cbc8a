"""An incident as one caller may see it: their projects' jobs, impact and evidence only.

One incident can impact jobs of several projects (a leaf switch under two tenants' jobs).
A caller bound to some projects sees the incident (status, cause class and entity, owner,
severity), its infrastructure evidence, and of the jobs only their own. Everything else is
narrowed by one `Narrowing`, used by every read (the list, the detail, the CLI, the exports):

- figures (impacted jobs, GPUs, lost GPU-hours and steps, recovery) are recomputed from the
  caller's jobs; other projects appear as a count (`other_projects`); a text that states a
  figure of the whole incident (a severity's reason) says so instead of stating it;
- any text that names another project's job (`vision/job-12/1`, the bare job id, the
  project, `project:vision`) has it replaced, at any depth of the log, and so has a node or
  rank known only as where another project's job ran (`seen on node-041`);
- log entries, evidence, notes and follow-up actions of another project's jobs, or tagged
  with the projects of whoever added them, are shown to those projects (and operators) only;
  flags raised by another project's job (`no_restart`) are not the caller's;
- the postmortem's text (drafted sections, edits, review comments) tells the whole story, so
  it is shown only to a caller holding every project the incident touches, as the postmortem
  routes decide (`jobtrail.http.postmortem`).

Operators (`projects=None`) see everything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

HIDDEN = "[another project's job]"
PLACE = "[where another project's job ran]"
PROJECT = "[another project]"
WITHHELD = ("the postmortem of an incident that also impacts other projects: readable by an "
            "operator or a token holding all of them")
JOB_FLAGS = frozenset({"no_restart", "waiting", "duplicate_run"})
"""Flags raised by one attempt (its restart deadline, a duplicate run): the job's project's."""
WHOLE = ("charged_gpu_hours",)
"""Log figures of the whole incident that a caller's jobs do not give: left out."""
_IDS = frozenset({"incident_id", "event_id", "cause_event", "first_event", "id", "command_id",
                  "action_id", "seq", "version"})
RECOVERY_STAGES = ("awaiting_restart", "restarted", "restored", "progress_resumed", "verified")
_BEFORE, _AFTER = r"(?<![\w.:/-])", r"(?![\w:/-]|\.\w)"
_JOB = r"[\w.@+=:-]*[\w@+=-]"  # a job id after its project's slash, not the sentence's dot


class Narrowing:
    """What of one incident a caller bound to `projects` may see, from its impacted jobs
    (and, for a detail, its evidence: the places only another project's jobs were seen)."""

    def __init__(self, jobs: Iterable[dict[str, Any]], projects: Sequence[str] | None, *,
                 evidence: Iterable[dict[str, Any]] = (), shown: Iterable[str] = ()) -> None:
        self.jobs = list(jobs)
        self.mine = None if projects is None else set(projects)
        mine = self.mine or set()
        self.own = [j for j in self.jobs if self.mine is None or j["project"] in mine]
        others = [j for j in self.jobs if self.mine is not None and j["project"] not in mine]
        self.others = sorted({j["project"] for j in others})
        self.everything = self.mine is None or not self.others
        own_ids = {j["job_id"] for j in self.own}
        foreign_ids = sorted({j["job_id"] for j in others} - own_ids, key=len, reverse=True)
        places = self._places(evidence, shown) if others else []
        self.text = _scrubber(self.others, foreign_ids, places)

    def _places(self, evidence: Iterable[dict[str, Any]], shown: Iterable[str]) -> list[str]:
        """Entities (and their nodes) seen only in other projects' evidence."""
        mine = self.mine or set()
        visible: set[str] = set()
        foreign: set[str] = set()
        for e in evidence:
            name = str(e.get("entity") or "")
            (foreign if e.get("project") and e["project"] not in mine else visible).add(name)
        visible |= set(shown)
        seen = visible | {v.split("/")[0] for v in visible}
        hidden = {p for e in foreign for p in (e, e.split("/")[0])} - seen
        hidden.discard("")
        return sorted(hidden, key=len, reverse=True)

    # --- what belongs to whom ----------------------------------------------------------

    def foreign(self, value: Any) -> bool:
        """A job, an evidence item, an impact: a dict naming a project not the caller's."""
        if self.mine is None or not isinstance(value, dict):
            return False
        project = value.get("project")
        if isinstance(project, str) and project and project not in self.mine:
            return True
        job = value.get("job")
        return isinstance(job, dict) and bool(job.get("project")) and \
            job["project"] not in self.mine

    def tagged_for(self, data: dict[str, Any]) -> bool:
        """Whether a log entry, note or action belongs to the caller's projects."""
        if self.mine is None:
            return True
        if self.foreign(data):
            return False
        tagged = data.get("projects")
        return not (isinstance(tagged, list) and tagged and not set(tagged) & self.mine)

    def names_another(self, text: str) -> bool:
        return self.text(text) != text

    # --- narrowing ---------------------------------------------------------------------

    def value(self, value: Any, key: str = "") -> Any:
        """`value` with every other project's job, evidence or impact taken out, at any
        depth (a diagnosis revision lists the jobs and the evidence it weighed), its names
        replaced in text, and project lists narrowed to the caller's."""
        if self.everything:
            return value
        if isinstance(value, str):
            return value if key in _IDS else self.text(value)
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for k, v in value.items():
                if k in WHOLE:
                    continue
                if self.foreign(v):
                    out[k] = HIDDEN
                elif k == "projects" and isinstance(v, list) and all(
                        isinstance(x, str) for x in v):
                    out[k] = sorted(set(v) & (self.mine or set()))
                elif k == "severity_why":
                    out[k] = self.severity_why()
                elif k == "flags" and isinstance(v, list):
                    out[k] = [f for f in v if f not in JOB_FLAGS]
                else:
                    out[k] = self.value(v, k)
            return out
        if isinstance(value, list):
            return [self.value(v, key) for v in value if not self.foreign(v)]
        return value

    def severity_why(self) -> str:
        return (f"set from the whole incident's impact, which includes {len(self.others)} "
                f"other project(s)")

    def figures(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row's impact figures, from the caller's jobs."""
        if self.everything:
            return row
        out = dict(row)
        own = self.own
        out["impacted_jobs"] = len({(j["project"], j["job_id"]) for j in own
                                    if j.get("role") != "linked"})
        out["impacted_gpus"] = sum(j["gpus"] for j in own if j.get("role") == "failed")
        out["lost_gpu_hours"] = round(sum(j["lost_gpu_hours"] for j in own), 6)
        if "lost_steps" in out:
            out["lost_steps"] = sum(j.get("lost_steps") or 0 for j in own)
        if "recovery" in out and all("recovery" in j for j in own):
            states = {j["recovery"] for j in own if j.get("role") == "failed"}
            out["recovery"] = min(states, key=RECOVERY_STAGES.index) if states else ""
        if "severity_why" in out:
            out["severity_why"] = self.severity_why()
        return out

    def entry(self, entry: dict[str, Any], whole_story: bool) -> dict[str, Any] | None:
        """One log entry as the caller may see it (None: not at all)."""
        data = entry.get("data")
        if not isinstance(data, dict):
            return entry
        if not self.tagged_for(data):
            return None
        kind = str(entry.get("kind") or "")
        if not whole_story and (kind.startswith("postmortem_") or kind == "learning_recorded"):
            return {**entry, "data": {"withheld": WITHHELD}}
        if self.everything:
            return entry
        if data.get("flag") in JOB_FLAGS and self.names_another(str(data.get("detail", ""))):
            return None  # another project's attempt was late to restart
        shown = self.value(data)
        if kind == "severity_changed":  # its reason states the whole incident's figures
            shown["why"] = self.severity_why()
        return {**entry, "data": shown}

    def flags(self, flags: Sequence[str], log: Sequence[dict[str, Any]]) -> list[str]:
        """Flags the caller's own jobs (or the incident itself) raised."""
        if self.everything:
            return list(flags)
        raised = {e["data"].get("flag") for e in log if isinstance(e.get("data"), dict)
                  and e["data"].get("flag") in JOB_FLAGS
                  and not self.names_another(str(e["data"].get("detail", "")))}
        return [f for f in flags if f not in JOB_FLAGS or f in raised]


def _scrubber(projects: Sequence[str], job_ids: Sequence[str],
              places: Sequence[str]) -> Callable[[str], str]:
    """Replaces, in a text, other projects' jobs (`p/job`, `p/job/3`, a bare job id), the
    projects themselves (`project:p`, `p`) and the places only their jobs were seen."""
    if not projects:
        return lambda text: text
    names = sorted(projects, key=len, reverse=True)
    parts = [(f"{_BEFORE}(?:{'|'.join(map(re.escape, names))})/{_JOB}(?:/\\d+)?", HIDDEN),
             (f"{_BEFORE}project:(?:{'|'.join(map(re.escape, names))}){_AFTER}", PROJECT),
             (f"{_BEFORE}(?:{'|'.join(map(re.escape, names))}){_AFTER}", PROJECT)]
    if job_ids:
        parts.append((f"{_BEFORE}(?:{'|'.join(map(re.escape, job_ids))}){_AFTER}", HIDDEN))
    if places:
        parts.append((f"{_BEFORE}(?:{'|'.join(map(re.escape, places))}){_AFTER}", PLACE))
    pattern = re.compile("|".join(f"({p})" for p, _ in parts))
    replacement = [r for _, r in parts]

    def scrub(text: str) -> str:
        return pattern.sub(lambda m: replacement[(m.lastindex or 1) - 1], text)
    return scrub


def scrubber(jobs: Iterable[dict[str, Any]], projects: Sequence[str] | None,
             ) -> Callable[[str], str]:
    """The text narrowing for a caller bound to `projects` of an incident impacting `jobs`
    (dicts with project and job_id): for text built elsewhere (a notification message)."""
    return Narrowing(jobs, projects).text


def summary(row: dict[str, Any], jobs: Sequence[dict[str, Any]],
            projects: Sequence[str] | None) -> dict[str, Any]:
    """An incident list row (or the head of a detail view) for `projects`."""
    if projects is None:
        return row
    view = Narrowing(jobs, projects)
    out = view.figures(view.value(row))
    out["projects"] = sorted({j["project"] for j in view.own})
    out["other_projects"] = len(view.others)
    return out


def detail(full: dict[str, Any], projects: Sequence[str] | None) -> dict[str, Any]:
    """`Store.incident`'s operator view, narrowed to `projects`."""
    if projects is None:
        return full
    jobs = full.get("jobs", [])
    evidence = full.get("evidence", [])
    view = Narrowing(jobs, projects, evidence=evidence,
                     shown=[str(full.get(k) or "") for k in ("entity", "cause_entity")])
    whole_story = not view.others
    out = view.figures(view.value({k: v for k, v in full.items()
                                   if k not in ("jobs", "evidence", "actions", "log")}))
    out["projects"] = sorted({j["project"] for j in view.own})
    out["other_projects"] = len(view.others)
    out["jobs"] = view.own
    out["evidence"] = [view.value(e) for e in evidence if not view.foreign(e)]
    out["actions"] = [view.value(a) for a in full.get("actions", []) if view.tagged_for(a)]
    log = full.get("log", [])
    if "flags" in full:
        out["flags"] = view.flags(full["flags"], log)
    out["log"] = [shown for entry in log
                  if (shown := view.entry(entry, whole_story)) is not None]
    return out


SHARED_POSTMORTEM = ("the incident also impacts other projects: its postmortem is readable by "
                     "an operator or a token holding all of them")


def postmortem_access(touched: Sequence[str], projects: Sequence[str] | None) -> str:
    """Who reads a postmortem (the whole story): '' when a caller bound to `projects` may,
    for an incident touching `touched`; 'unknown' when the incident is not theirs to see
    (answered as an unknown incident is); 'shared' when it also impacts other projects."""
    if projects is None:
        return ""
    if not touched or not set(touched) & set(projects):
        return "unknown"
    return "" if set(touched) <= set(projects) else "shared"
