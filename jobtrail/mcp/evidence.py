"""The reads behind the MCP tools, bound to one principal: the same store reads the HTTP API
and the CLI run (`Store.timeline`, `entity_timeline`, `incidents`, `incident`,
`queries.attempts_under`), narrowed the same way (`jobtrail.views.incident`), each answer
with what it cites and where to check it. Incident answers are in `jobtrail.mcp.incident`.

Authorised like the API: a project the credential does not hold answers like an unknown
job, an incident touching none of its projects like an unknown incident.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobtrail.config import Settings
from jobtrail.identity import Principal
from jobtrail.mcp import incident as incidents
from jobtrail.mcp import tools as t
from jobtrail.mcp.paging import Links, cites, page
from jobtrail.mcp.refusal import Refusal
from processors.topology import Topology


class Evidence:
    """One store, its wiring and the links, read for a principal per call."""

    def __init__(self, store: Any, settings: Settings,
                 topology: Callable[[], Topology]) -> None:
        self.store = store
        self.settings = settings
        self.topology = topology
        self.links = Links(settings.grafana_url, settings.public_url)

    def call(self, name: str, arguments: dict[str, Any], who: Principal) -> dict[str, Any]:
        """Run tool `name` for `who`; raises `Refusal` naming the field."""
        tool = t.BY_NAME.get(name)
        if tool is None:
            raise Refusal("name", f"no tool {name!r} (tools: {', '.join(t.BY_NAME)})")
        args = _validated(tool.args, arguments)
        given = args.model_dump(mode="json")
        handler: Callable[[Any, Principal, dict[str, Any]], dict[str, Any]] = getattr(
            self, f"_{name}")
        return handler(args, who, given)

    # --- scope ----------------------------------------------------------------------------

    def one_project(self, who: Principal, project: str, what: str = "job") -> str:
        if not who.may_read(project):
            raise Refusal("project", f"no such {what} (or not a project this credential may "
                                     "read)")
        return project

    def projects(self, who: Principal, asked: list[str]) -> list[str]:
        """Asked projects narrowed to what `who` may read; none asked: all it may."""
        if asked:
            return [p for p in asked if who.may_read(p)]
        if who.operator:
            from jobtrail.store.queries import known_projects

            return known_projects(self.store)
        return sorted(who.projects)

    @staticmethod
    def scope(who: Principal, asked: list[str]) -> list[str] | None:
        """As the incident routes: the credential's projects narrowed by those asked; None
        for an operator asking for all (`jobtrail.http.incidents.scope`)."""
        if who.operator:
            return asked or None
        return [p for p in (asked or sorted(who.projects)) if who.may_read(p)]

    # --- tools ----------------------------------------------------------------------------

    def _list_incidents(self, args: t.ListIncidents, who: Principal,
                        given: dict[str, Any]) -> dict[str, Any]:
        rows = self.store.incidents(self.scope(who, args.projects), status=args.status or "",
                                    since=args.since, limit=10_000)
        chunk, paging = page("list_incidents", given, rows)
        return {"incidents": [{**r, "links": self.links.incident(r["incident_id"])}
                              for r in chunk], "page": paging,
                "cites": cites(log={r["incident_id"]: [] for r in chunk})}

    def _job_timeline(self, args: t.Timeline, who: Principal,
                      given: dict[str, Any]) -> dict[str, Any]:
        from jobtrail.mcp.paging import offset

        project = self.one_project(who, args.project)
        start = offset("job_timeline", given)
        rows = self.store.timeline(project, args.job_id, attempt=args.attempt,
                                   since=args.since, until=args.until,
                                   source=args.source or "", offset=start,
                                   limit=args.limit + 1)
        chunk, paging = page("job_timeline", given, rows, total=start + len(rows))
        attempts = sorted({int(r["attempt"]) for r in chunk})
        times = [r["time"] for r in chunk]
        return {"project": project, "job_id": args.job_id, "rows": chunk, "page": paging,
                "attempts": attempts, "cites": cites(r["event_id"] for r in chunk),
                "links": self.links.job(project, args.job_id, args.attempt,
                                        min(times, default=None), max(times, default=None))}

    def _incident(self, args: t.IncidentArgs, who: Principal,
                  given: dict[str, Any]) -> dict[str, Any]:
        return incidents.answer(self, args, who, given)

    def _similar_incidents(self, args: t.Similar, who: Principal,
                           given: dict[str, Any]) -> dict[str, Any]:
        return incidents.similar(self, args, who)

    def _proposed_actions(self, args: t.Actions, who: Principal,
                          given: dict[str, Any]) -> dict[str, Any]:
        return incidents.actions(self, args, who)

    def _where(self, args: t.Where, who: Principal, given: dict[str, Any]) -> dict[str, Any]:
        from jobtrail.http.reads import _attempt_json
        from jobtrail.store.queries import attempts_under

        named = [k for k in ("node", "switch", "filesystem") if getattr(args, k)]
        if len(named) != 1:
            raise Refusal("node", "give exactly one of node, switch or filesystem"
                          + (f" (got {', '.join(named)})" if named else ""))
        projects = self.projects(who, args.projects)
        found = attempts_under(self.store, self.topology(), projects, args.at,
                               node=args.node, switch=args.switch,
                               filesystem=args.filesystem)
        attempts = [_attempt_json(a) for a in found]
        asked = {named[0]: getattr(args, named[0]), "at": args.at.isoformat()}
        return {"at": args.at, "asked": asked, "attempts": attempts,
                "links": self.links.where(asked, projects),
                "jobs": [self.links.job(a.project, a.job_id, a.attempt) for a in found],
                "cites": cites()}

    def _entity_history(self, args: t.EntityHistory, who: Principal,
                        given: dict[str, Any]) -> dict[str, Any]:
        from jobtrail.http.reads import _attempt_json
        from jobtrail.store.queries import attempts_on

        projects = self.projects(who, args.projects)
        rows = self.store.entity_timeline(projects, args.entity, since=args.since,
                                          until=args.until, limit=100_000)
        chunk, paging = page("entity_history", given, rows)
        nodes, filesystem = self._served_by(args.entity)
        served = attempts_on(self.store, projects, nodes=nodes, filesystem=filesystem)
        held = incidents.on_entity(self, args.entity, who, args.projects)
        return {"entity": args.entity, "events": chunk, "page": paging,
                "served": [{**_attempt_json(a), "links": self.links.job(
                    a.project, a.job_id, a.attempt)} for a in served],
                "served_through": {"nodes": nodes, "filesystem": filesystem},
                "incidents": held,
                "cites": cites((r["id"] for r in chunk),
                               {i["incident_id"]: i["cites_seqs"] for i in held}),
                "links": self.links.entity(args.entity, projects)}

    def _served_by(self, entity: str) -> tuple[list[str], str]:
        """The nodes (and filesystem) whose attempts an entity served: a node, its GPUs and
        NICs (`node-041/gpu3`); every node ever cabled under a switch or to its port; a
        filesystem or its target."""
        topology = self.topology()
        head, _, rest = entity.partition("/")
        links = topology.ever_under(head, rest)
        if links:
            return sorted({link.node for link in links}), ""
        fs = topology.filesystem_of_target(entity) or topology.filesystem_of_target(head)
        if fs:
            return [], fs
        found = self.store._q(
            "SELECT count() FROM job_attempts FINAL WHERE has(nodes, {n:String})",
            n=head).result_rows
        if found and found[0][0]:
            return [head], ""
        return [], entity

    def _completeness(self, args: t.Completeness, who: Principal,
                      given: dict[str, Any]) -> dict[str, Any]:
        from jobtrail.store.completeness import as_json, attempt_completeness

        project = self.one_project(who, args.project)
        attempts = [a for a in self.store.attempts(project, args.job_id)
                    if args.attempt is None or a.attempt == args.attempt]
        if not attempts:
            raise Refusal("attempt" if args.attempt is not None else "job_id",
                          "no such attempt of this job" if args.attempt is not None
                          else "no such job")
        out, ids = [], []
        topology = self.topology()
        for a in attempts:
            assessed = attempt_completeness(self.store, topology, a)
            if assessed is None:
                out.append({"attempt": a.attempt, "state": a.state, "started": False})
                continue
            facts, assessment = assessed
            shown = as_json(facts, assessment)
            ids += [s["last_event"] for s in shown["gaps"] + shown["streams"]]
            out.append({"attempt": a.attempt, "state": a.state, **shown,
                        "links": self.links.job(project, args.job_id, a.attempt,
                                                facts.start, facts.end)})
        return {"project": project, "job_id": args.job_id, "attempts": out,
                "cites": cites(ids)}


def _validated(model: type[t.Args], arguments: dict[str, Any]) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "arguments"
        message = "not a field of this tool" if first.get("type") == "extra_forbidden" \
            else first["msg"]
        raise Refusal(where, message) from None
