"""An incident as one caller may see it: their projects' jobs, impact and evidence only.

One incident can impact jobs of several projects (a leaf switch under two tenants' jobs).
A caller bound to some projects sees the incident (status, cause class and entity, owner,
severity), its infrastructure evidence, and of the jobs only their own: impact figures are
recomputed from their jobs, other projects appear as a count (`other_projects`), and any text
that names another project's job (`vision/job-12/1` in an explanation, a log entry's data) has
it replaced. Notes and follow-up actions carry the projects of whoever added them and are
shown to those projects (and operators) only. Operators (`projects=None`) see everything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

HIDDEN = "[another project's job]"
_TEXT = ("title", "entity", "explanation", "owner_why", "severity_why", "key")


def _foreign_keys(jobs: Sequence[dict[str, Any]], mine: set[str]) -> list[str]:
    keys: set[str] = set()
    for j in jobs:
        if j["project"] not in mine:
            keys.add(f"{j['project']}/{j['job_id']}/{j['attempt']}")
            keys.add(f"{j['project']}/{j['job_id']}")
    return sorted(keys, key=len, reverse=True)  # the long form first


def _scrubber(keys: list[str]) -> Any:
    if not keys:
        return lambda text: text
    pattern = re.compile("|".join(re.escape(k) for k in keys))
    return lambda text: pattern.sub(HIDDEN, text)


def _foreign(value: Any, mine: set[str]) -> bool:
    """A job, an evidence item, an impact: a dict naming a project not the caller's."""
    if not isinstance(value, dict):
        return False
    project = value.get("project")
    if isinstance(project, str) and project and project not in mine:
        return True
    job = value.get("job")
    return isinstance(job, dict) and bool(job.get("project")) and job["project"] not in mine


def _scrub_value(value: Any, scrub: Any, mine: set[str]) -> Any:
    """`value` with every other project's job, evidence or impact taken out, at any depth (a
    diagnosis revision lists the jobs and the evidence it weighed), their names replaced
    in text, and project lists narrowed to the caller's."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: HIDDEN if _foreign(v, mine) else
                sorted(set(v) & mine) if k == "projects" and isinstance(v, list) and all(
                    isinstance(x, str) for x in v) else _scrub_value(v, scrub, mine)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_value(v, scrub, mine) for v in value if not _foreign(v, mine)]
    return value


def _tagged_for(data: dict[str, Any], mine: set[str]) -> bool:
    """Whether a log entry, note or action belongs to the caller's projects."""
    job = data.get("job")
    if isinstance(job, dict) and job.get("project") and job["project"] not in mine:
        return False
    project = data.get("project")
    if isinstance(project, str) and project and project not in mine:
        return False
    tagged = data.get("projects")
    return not (isinstance(tagged, list) and tagged and not set(tagged) & mine)


def summary(row: dict[str, Any], jobs: Sequence[dict[str, Any]],
            projects: Sequence[str] | None) -> dict[str, Any]:
    """An incident list row (or the head of a detail view) for `projects`."""
    if projects is None:
        return row
    mine = set(projects)
    own = [j for j in jobs if j["project"] in mine]
    foreign = {j["project"] for j in jobs if j["project"] not in mine}
    out = dict(row)
    scrub = _scrubber(_foreign_keys(jobs, mine))
    for name in _TEXT:
        if isinstance(out.get(name), str):
            out[name] = scrub(out[name])
    out["projects"] = sorted({j["project"] for j in own})
    out["other_projects"] = len(foreign)
    if foreign:
        out["impacted_jobs"] = len({(j["project"], j["job_id"]) for j in own
                                    if j.get("role") != "linked"})
        out["impacted_gpus"] = sum(j["gpus"] for j in own if j.get("role") == "failed")
        out["lost_gpu_hours"] = round(sum(j["lost_gpu_hours"] or 0.0 for j in own), 6)
        unknown = sorted({j["loss_unknown"] for j in own if j.get("loss_unknown")})
        out["loss_unknown"] = "; ".join(unknown)
        if unknown and not out["lost_gpu_hours"]:
            out["lost_gpu_hours"] = None  # never a loss of 0 no source could count
        if "lost_steps" in out:
            out["lost_steps"] = sum(j["lost_steps"] for j in own)
        if "severity_why" in out:
            out["severity_why"] = (f"set from the whole incident's impact, which includes "
                                   f"{len(foreign)} other project(s)")
    return out


def detail(full: dict[str, Any], projects: Sequence[str] | None) -> dict[str, Any]:
    """`Store.incident`'s operator view, narrowed to `projects`."""
    if projects is None:
        return full
    mine = set(projects)
    jobs = full.get("jobs", [])
    scrub = _scrubber(_foreign_keys(jobs, mine))
    out = summary({k: v for k, v in full.items()
                   if k not in ("jobs", "evidence", "actions", "log")}, jobs, projects)
    out["jobs"] = [j for j in jobs if j["project"] in mine]
    out["evidence"] = [e for e in full.get("evidence", [])
                       if not e.get("project") or e["project"] in mine]
    out["actions"] = [a for a in full.get("actions", [])
                      if not a.get("projects") or set(a["projects"]) & mine]
    out["log"] = [{**entry, "data": _scrub_value(entry["data"], scrub, mine)}
                  for entry in full.get("log", []) if _tagged_for(entry["data"], mine)]
    return out
