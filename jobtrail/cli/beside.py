"""The CLI beside a running `serve`: when `serve` holds the home, the CLI's incident commands
(and `incident show`, `incidents`) go to it over HTTP, as the operator running the CLI.

`serve` writes `HOME/.serve.json` (pid, loopback address, a key for the run; mode 0600) at
start (`jobtrail.http.beside`); the home's lock names the pid that holds it. The file is
used only when both agree, so a file a killed server left behind is never followed.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import click

SERVE_FILE = ".serve.json"
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Serving:
    url: str
    key: str
    pid: int


def serving(home: Path, holder: dict[str, Any]) -> Serving | None:
    """The server holding `home`, when it announced itself (None: another process, or a
    server that did not: an older one, cluster mode, a port chosen by the system)."""
    try:
        found = json.loads((Path(home) / SERVE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or found.get("pid") != holder.get("pid"):
        return None
    url, key = found.get("url"), found.get("key")
    if not isinstance(url, str) or not url.startswith("http://") or not isinstance(key, str):
        return None
    return Serving(url.rstrip("/"), key, int(found["pid"]))


def call(served: Serving, who: Any, method: str, path: str, body: dict[str, Any] | None = None,
         query: dict[str, Any] | None = None) -> Any:
    """One request to the server as `who` (the CLI's principal); the JSON answer, or a
    ClickException with the server's error."""
    url = served.url + path + (f"?{urlencode(query, doseq=True)}" if query else "")
    request = urllib.request.Request(  # noqa: S310 (serving() admits http:// only)
        url, method=method, data=json.dumps(body).encode() if body is not None else None,
        headers={"X-Jobtrail-Home-Key": served.key, "X-Jobtrail-Operator": who.name,
                 "X-Jobtrail-Operator-Credential": who.credential,
                 "Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:  # noqa: S310
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        try:
            error = json.loads(exc.read()).get("error") or exc.reason
        except (ValueError, AttributeError):
            error = exc.reason
        raise click.ClickException(f"{error} (answered {exc.code} by jobtrail serve, pid "
                                   f"{served.pid}, at {served.url})") from None
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"jobtrail serve (pid {served.pid}) holds the home but "
                                   f"did not answer at {served.url}: {exc}") from None


def command(served: Serving, who: Any, cmd: Any) -> list[Any] | None:
    """The incident command through the server: the events it appended (None: queued)."""
    from processors.incidents.model import IncidentEvent

    body: dict[str, Any] = {"command": cmd.command, "command_id": cmd.command_id,
                            "data": cmd.data}
    if cmd.at is not None:
        body["at"] = cmd.at.isoformat()
    answer = call(served, who, "POST", f"/v1/incidents/{quote(cmd.incident_id)}/commands",
                  body)
    if "events" not in answer:
        return None
    return [IncidentEvent.model_validate(e) for e in answer["events"]]


class Reader:
    """What the read commands read: this process's store, or, while `serve` holds the home,
    that server's API as the CLI's operator (the same records, times as ISO text)."""

    def __init__(self, settings: Any) -> None:
        from jobtrail.cli.common import _store, operator
        from jobtrail.runtime.home import HomeInUse

        self.store: Any = None
        self.served: Serving | None = None
        self.who = operator(settings)
        try:
            self.store = _store(settings)
        except HomeInUse as exc:
            self.served = serving(settings.home, exc.holder)
            if self.served is None:
                raise

    def _get(self, path: str, query: dict[str, Any] | None = None) -> Any:
        assert self.served is not None
        return call(self.served, self.who, "GET", path,
                    query={k: v for k, v in (query or {}).items() if v not in (None, "", [])})

    def incidents(self, projects: list[str] | None, *, status: str = "",
                  infrastructure: bool = False) -> list[dict[str, Any]]:
        if self.store is not None:
            rows: list[dict[str, Any]] = self.store.incidents(projects, status=status,
                                                              infrastructure=infrastructure)
            return rows
        return list(self._get("/v1/incidents", {
            "project": projects or [], "status": status,
            "include": "infrastructure" if infrastructure else ""})["incidents"])

    def incident(self, incident_id: str, projects: list[str] | None) -> dict[str, Any] | None:
        if self.store is not None:
            found: dict[str, Any] | None = self.store.incident(incident_id, projects)
            return found
        try:
            return dict(self._get(f"/v1/incidents/{quote(incident_id)}",
                                  {"project": projects or []}))
        except click.ClickException as exc:
            if "no such incident" in exc.message:
                return None
            raise

    def entity_timeline(self, projects: list[str], name: str, *, since: Any = None,
                        until: Any = None, cluster: str = "") -> list[dict[str, Any]]:
        if self.store is not None:
            rows: list[dict[str, Any]] = self.store.entity_timeline(
                projects, name, since=since, until=until, cluster=cluster)
            return rows
        # the route wants a project; with none asked, one no job has (infrastructure only)
        return list(self._get(f"/v1/entities/{quote(name, safe='')}/timeline", {
            "project": projects or ["-"], "since": since.isoformat() if since else None,
            "until": until.isoformat() if until else None,
            "cluster": cluster or None})["rows"])
