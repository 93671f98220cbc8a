"""Read routes: a job's timeline, membership (`where`, an attempt's resources) and what
happened on an entity. Every one is bound to the caller's projects: a project the token does
not hold answers like an unknown job (404), so the API does not reveal which projects exist.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from jobtrail.http.common import BACKEND, fail, query_int, query_time, reply
from jobtrail.http.guard import principal


def _one_project(request: web.Request) -> str:
    project = request.query.get("project", "")
    if not project:
        fail(web.HTTPBadRequest, "project is required")
    if not principal(request).may_read(project):
        fail(web.HTTPNotFound, "no such job")
    return project


def _projects(request: web.Request) -> list[str]:
    """Requested projects (`?project=a&project=b`), narrowed to what the token may read."""
    who = principal(request)
    wanted = request.query.getall("project", [])
    if not wanted:
        fail(web.HTTPBadRequest, "project is required")
    if "" in wanted:
        fail(web.HTTPBadRequest, "project must not be empty")
    return [p for p in wanted if who.may_read(p)]


def _attempt_json(a: Any) -> dict[str, Any]:
    return {"project": a.project, "cluster": a.cluster, "job_id": a.job_id,
            "attempt": a.attempt, "state": a.state,
            "nodes": list(a.nodes), "gpus": a.gpus, "started_at": a.started_at,
            "ended_at": a.ended_at, "mounts": list(a.mounts)}


async def job_timeline(request: web.Request) -> web.Response:
    project = _one_project(request)
    backend = request.app[BACKEND]
    rows = await backend.call(backend.store.timeline, project, request.match_info["job_id"],
                              attempt=query_int(request, "attempt"),
                              since=query_time(request, "since"),
                              until=query_time(request, "until"))
    return reply({"rows": rows})


async def where(request: web.Request) -> web.Response:
    """Attempts on ?node= / ?switch= / ?filesystem= at ?at= (project-bound)."""
    from jobtrail.store.queries import attempts_under

    projects = _projects(request)
    at = query_time(request, "at")
    if at is None:
        fail(web.HTTPBadRequest, "at is required")
    backend = request.app[BACKEND]
    q = request.query
    found = await backend.call(attempts_under, backend.store, backend.topology(), projects, at,
                               node=q.get("node", ""), switch=q.get("switch", ""),
                               filesystem=q.get("filesystem", ""),
                               cluster=q.get("cluster", ""))
    return reply({"attempts": [_attempt_json(a) for a in found]})


async def attempt_resources(request: web.Request) -> web.Response:
    from jobtrail.store.queries import resources

    project = _one_project(request)
    number = query_int(request, "attempt")
    backend = request.app[BACKEND]
    found = await backend.call(resources, backend.store, backend.topology(), project,
                               request.match_info["job_id"], number or 0)
    if found is None:
        fail(web.HTTPNotFound, "no such attempt")
    return reply({**_attempt_json(found.attempt), "switches": found.switches,
                  "links": found.links, "filesystems": found.filesystems,
                  "checkpoints": found.checkpoints})


async def entity_timeline(request: web.Request) -> web.Response:
    projects = _projects(request)
    backend = request.app[BACKEND]
    rows = await backend.call(backend.store.entity_timeline, projects,
                              request.match_info["name"], since=query_time(request, "since"),
                              until=query_time(request, "until"),
                              cluster=request.query.get("cluster", ""))
    return reply({"rows": rows})
