"""The incident tools: one incident (cause, candidates weighed, diagnosis history, impact,
completeness, evidence), similar past incidents, the follow-up actions with their commands.

Every answer starts from `Store.incident(id, scope)` or `Store.incidents(scope)`, the reads
the HTTP API answers with, so a shared incident is narrowed by the same
`jobtrail.views.incident.Narrowing`. The candidate causes are those the diagnosis wrote
into its explanation (`processors.incidents.weighing.losers`), matched to the evidence that
carries their event ids.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from jobtrail.identity import Principal
from jobtrail.mcp import tools as t
from jobtrail.mcp.paging import cites, page
from jobtrail.mcp.refusal import Refusal

if TYPE_CHECKING:
    from jobtrail.mcp.evidence import Evidence

DIAGNOSIS = ("opened", "cause_updated", "diagnosis_revised", "owner_assigned",
             "severity_changed", "recovery_observed", "recovery_verified", "job_impacted",
             "impact_assessed", "acknowledged", "mitigated", "resolved", "reopened", "closed")
_LOST = re.compile(r"(?P<entity>[^\s;:]+) (?P<type>[a-z_]+\.[a-z_.]+) \(score (?P<score>\d+): "
                   r"(?P<reasons>[^)]*)\): (?P<why>[^;]+?)(?=; |\.$|$)")


def _found(ev: Evidence, incident_id: str, who: Principal, asked: list[str]) -> dict[str, Any]:
    found = ev.store.incident(incident_id, ev.scope(who, asked))
    if found is None:  # unknown, or touching none of the caller's projects: one answer
        raise Refusal("incident_id", "no such incident")
    return found  # type: ignore[no-any-return]


def candidates(found: dict[str, Any]) -> list[dict[str, Any]]:
    """The chosen cause and the candidates that lost, with the evidence ids behind each."""
    evidence = found.get("evidence", [])

    def ids(entity: str, kind: str) -> list[str]:
        return sorted({e["event_id"] for e in evidence
                       if e.get("entity") == entity and e.get("type") == kind})

    out = []
    if found.get("cause_event"):
        chosen = next((e for e in evidence if e["event_id"] == found["cause_event"]), None)
        out.append({"entity": found.get("cause_entity", ""),
                    "type": chosen["type"] if chosen else "", "chosen": True,
                    "confidence": round(float(found.get("confidence") or 0), 4),
                    "event_ids": [found["cause_event"]]})
    text = str(found.get("explanation") or "")
    _, marker, lost = text.partition("Candidates that lost: ")
    for m in _LOST.finditer(lost if marker else ""):
        out.append({"entity": m["entity"], "type": m["type"], "chosen": False,
                    "score": int(m["score"]), "reasons": m["reasons"].split(", "),
                    "lost_because": m["why"].strip(), "event_ids": ids(m["entity"], m["type"])})
    return out


def answer(ev: Evidence, args: t.IncidentArgs, who: Principal,
           given: dict[str, Any]) -> dict[str, Any]:
    found = _found(ev, args.incident_id, who, args.projects)
    log = found.get("log", [])
    seq_of = {str(e["data"].get("event_id")): e["seq"] for e in log
              if e["kind"] == "evidence_attached" and isinstance(e.get("data"), dict)}
    evidence, paging = page("incident", given, found.get("evidence", []))
    diagnosis = [{"seq": e["seq"], "kind": e["kind"], "time": e["time"],
                  "by": f"{e['actor_kind']}:{e['actor']}" + (f"/{e['rule']}" if e["rule"]
                                                             else ""),
                  "data": e["data"]} for e in log if e["kind"] in DIAGNOSIS]
    weighed = candidates(found)
    gaps = completeness(ev, found)
    caveat = next((g["caveat"] for g in gaps if g["caveat"]), "")
    head = {k: found.get(k) for k in (
        "incident_id", "title", "status", "severity", "severity_why", "class", "entity",
        "owner", "owner_why", "commander", "opened_at", "acknowledged_at", "mitigated_at",
        "resolved_at", "closed_at", "first_signal_at", "last_signal_at", "flags",
        "projects", "other_projects", "linked", "postmortem_status")}
    event_ids = [e["event_id"] for e in evidence]
    event_ids += [i for c in weighed for i in c["event_ids"]]
    seqs = [d["seq"] for d in diagnosis] + [seq_of[i] for i in event_ids if i in seq_of]
    return {
        **head,
        "cause": {"class": found.get("cause_class"), "entity": found.get("cause_entity"),
                  "event_id": found.get("cause_event"),
                  "confidence": round(float(found.get("confidence") or 0), 4),
                  "explanation": found.get("explanation"),
                  "rests_on_incomplete_evidence": bool(caveat), "caveat": caveat},
        "candidates": weighed,
        "diagnosis": diagnosis,
        "impact": {k: found.get(k) for k in ("impacted_jobs", "impacted_gpus",
                                             "lost_gpu_hours", "lost_steps", "recovery")}
        | {"jobs": found.get("jobs", [])},
        "completeness": gaps,
        "evidence": [{**e, "seq": seq_of.get(e["event_id"])} for e in evidence],
        "page": paging,
        "actions": len(found.get("actions", [])),
        "log_entries": len(log),
        "cites": cites(event_ids, {found["incident_id"]: seqs}),
        "links": ev.links.incident(found["incident_id"]) | {"jobs": [
            ev.links.job(j["project"], j["job_id"], j["attempt"])
            for j in found.get("jobs", [])]},
    }


def completeness(ev: Evidence, found: dict[str, Any]) -> list[dict[str, Any]]:
    """The completeness of each attempt the (narrowed) incident holds as failed."""
    from jobtrail.views.completeness import of_incident

    return of_incident(ev.store, ev.topology(), found)


def similar(ev: Evidence, args: t.Similar, who: Principal) -> dict[str, Any]:
    """Earlier incidents the caller may see, scored: the same cause entity or entity (4),
    the same node (2), the same class (1)."""
    this = _found(ev, args.incident_id, who, args.projects)
    rows = ev.store.incidents(ev.scope(who, args.projects), limit=10_000)
    entities = {x for x in (this.get("entity"), this.get("cause_entity")) if x}
    nodes = {e.split("/")[0] for e in entities}
    out = []
    for r in rows:
        if r["incident_id"] == this["incident_id"] or r["opened_at"] >= this["opened_at"]:
            continue
        why, score = [], 0
        if r["entity"] in entities:
            score += 4
            why.append(f"the same entity ({r['entity']})")
        elif r["entity"].split("/")[0] in nodes:
            score += 2
            why.append(f"the same node or switch ({r['entity'].split('/')[0]})")
        if r["class"] == this.get("class"):
            score += 1
            why.append(f"the same class ({r['class']})")
        if score:
            out.append({**r, "score": score, "why": why,
                        "links": ev.links.incident(r["incident_id"])})
    out.sort(key=lambda r: (-r["score"], -r["opened_at"].timestamp(), r["incident_id"]))
    return {"incident_id": this["incident_id"], "similar": out[:args.limit],
            "cites": cites(log={r["incident_id"]: [] for r in out[:args.limit]}),
            "links": ev.links.incident(this["incident_id"])}


def actions(ev: Evidence, args: t.Actions, who: Principal) -> dict[str, Any]:
    """The follow-up actions the caller may see, each with the commands that move it."""
    from jobtrail.http.incidents import TENANT_COMMANDS
    from jobtrail.identity.roles import command_role

    found = _found(ev, args.incident_id, who, args.projects)
    inc = found["incident_id"]
    touched = set(found.get("projects") or ())
    proposed = {str(e["data"].get("action_id")): e["seq"] for e in found.get("log", [])
                if e["kind"] in ("action_proposed", "action_added")
                and isinstance(e.get("data"), dict)}
    out = []
    for a in found.get("actions", []):
        aid = a["action_id"]
        verb, cli = (("accept_action", f"jobtrail incident action-accept {inc} {aid}")
                     if a["status"] == "proposed" else
                     ("update_action", f"jobtrail incident action-done {inc} {aid}"))
        role = command_role(verb, {})
        shared_ok = who.operator or verb in TENANT_COMMANDS or (
            bool(touched) and touched <= who.projects and not found.get("other_projects"))
        out.append({**a, "seq": proposed.get(aid),
                    "runbook": re.findall(r"`([^`\n]{1,200})`", a.get("title", "")),
                    "commands": {"cli": cli, "api": {
                        "method": "POST", "url": f"{ev.links.api}/v1/incidents/{inc}/commands",
                        "body": {"command": verb, "command_id": f"{verb}-{aid}",
                                 "data": {"action_id": aid, **({"status": "done"}
                                                               if verb == "update_action"
                                                               else {})}}},
                        "needs_role": role,
                        "this_credential_may": who.allows(role) and shared_ok}})
    return {"incident_id": inc, "actions": out, "read_only": True,
            "cites": cites(log={inc: [s for s in proposed.values()]}),
            "links": ev.links.incident(inc)}


def on_entity(ev: Evidence, entity: str, who: Principal,
              asked: list[str]) -> list[dict[str, Any]]:
    """Incidents whose entity or cause entity is `entity` (or sits on it), as the caller
    may see each."""
    head = entity.split("/")[0]
    ids = ev.store.incidents_on(sorted({entity, head}))
    out = []
    for incident_id in ids[:100]:
        found = ev.store.incident(incident_id, ev.scope(who, asked))
        if found is None:
            continue
        seqs = [e["seq"] for e in found.get("log", []) if e["kind"] == "cause_updated"]
        out.append({k: found.get(k) for k in ("incident_id", "title", "status", "severity",
                                              "class", "entity", "cause_entity",
                                              "opened_at", "explanation")}
                   | {"cites_seqs": seqs, "links": ev.links.incident(incident_id)})
    return out
