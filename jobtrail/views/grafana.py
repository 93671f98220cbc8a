"""Grafana's side: publish the dashboards and the data source (grafana-client), and per-team
read-only access on a ClickHouse server (user, grants, row policies, and its data source).

Publishing is idempotent: the folder is created once and kept (its title updated if
needed), each dashboard is saved with `overwrite` into that folder by its pinned uid (so an
update never moves it to the root), the data source is created or updated by its uid.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dashboards.clickhouse import PLUGIN, UID
from dashboards.common import FOLDER_UID

FOLDER_TITLE = "jobtrail"

# every table Grafana reads, and how a team's rows are recognised in it
ROW_POLICIES: dict[str, str] = {
    "events": "project IN ({p}) OR project = ''",  # cluster-level events are shared context
    "job_timeline": "project IN ({p})",
    "job_attempts": "project IN ({p})",
    "incidents": "hasAny(projects, [{p}])",
    "incident_jobs": "project IN ({p})",
    "incident_evidence": "project IN ({p}) OR (project = '' AND incident_id IN "
                         "(SELECT incident_id FROM {db}.incidents WHERE hasAny(projects, [{p}])))",
    "incident_log": "incident_id IN (SELECT incident_id FROM {db}.incidents "
                    "WHERE hasAny(projects, [{p}]))",
    "actions": "incident_id IN (SELECT incident_id FROM {db}.incidents "
               "WHERE hasAny(projects, [{p}]))",
}
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def datasource_body(*, url: str, database: str, username: str, uid: str = UID,
                    name: str = "jobtrail", password_ref: str = "") -> dict[str, Any]:
    """The plugin v4 data source. The password is a reference (`$ENV`) for provisioning, or
    left out: it is set in Grafana, never written to the repo or printed."""
    from urllib.parse import urlparse

    parsed = urlparse(url if "://" in url else f"http://{url}")
    body: dict[str, Any] = {
        "name": name, "uid": uid, "type": PLUGIN, "access": "proxy", "isDefault": False,
        "jsonData": {"host": parsed.hostname or "localhost", "port": parsed.port or 8123,
                     "protocol": "http", "secure": parsed.scheme == "https",
                     "defaultDatabase": database, "username": username},
    }
    if password_ref:
        body["secureJsonData"] = {"password": password_ref}
    return body


@dataclass
class Published:
    folder: str
    dashboards: list[str] = field(default_factory=list)
    datasource: str = ""
    created: list[str] = field(default_factory=list)


def publish(url: str, token: str, boards: dict[str, dict[str, Any]],
            datasource: dict[str, Any] | None, message: str = "jobtrail dashboards publish",
            timeout: float = 30.0) -> Published:
    from grafana_client import GrafanaApi
    from grafana_client.client import GrafanaClientError

    api = GrafanaApi.from_url(url, credential=token, timeout=timeout)
    out = Published(folder=FOLDER_UID)
    try:
        folder = api.folder.get_folder(FOLDER_UID)
        if folder.get("title") != FOLDER_TITLE:
            api.folder.update_folder(FOLDER_UID, title=FOLDER_TITLE, overwrite=True)
    except GrafanaClientError as exc:
        if exc.status_code != 404:
            raise
        api.folder.create_folder(FOLDER_TITLE, uid=FOLDER_UID)
        out.created.append(f"folder {FOLDER_UID}")
    if datasource is not None:
        uid = str(datasource["uid"])
        try:
            api.datasource.get_datasource_by_uid(uid)
            api.datasource.update_datasource_by_uid(uid, datasource)
        except GrafanaClientError as exc:
            if exc.status_code != 404:
                raise
            api.datasource.create_datasource(datasource)
            out.created.append(f"datasource {uid}")
        out.datasource = uid
    for name, board in sorted(boards.items()):
        api.dashboard.update_dashboard({"dashboard": {**board, "id": None},
                                        "folderUid": FOLDER_UID, "overwrite": True,
                                        "message": message})
        out.dashboards.append(str(board.get("uid", name)))
    return out


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class Grant:
    team: str
    projects: tuple[str, ...]
    database: str

    @property
    def user(self) -> str:
        return f"grafana_{self.team.replace('-', '_')}"

    def statements(self, password_sql: str) -> list[str]:
        """The DDL, with the password as given (a placeholder in dry runs)."""
        p = ", ".join(_quote(x) for x in self.projects)
        db = self.database
        out = [f"CREATE USER IF NOT EXISTS {self.user} IDENTIFIED WITH sha256_password BY "
               f"{password_sql} SETTINGS readonly = 1",
               f"ALTER USER {self.user} IDENTIFIED WITH sha256_password BY {password_sql}"]
        for table, condition in ROW_POLICIES.items():
            out.append(f"GRANT SELECT ON {db}.{table} TO {self.user}")
            out.append(f"CREATE ROW POLICY OR REPLACE {self.user}_{table} ON {db}.{table} "
                       f"FOR SELECT USING {condition.format(p=p, db=db)} TO {self.user}")
        return out


def grant(team: str, projects: Sequence[str], database: str) -> Grant:
    if not _NAME.match(team):
        raise ValueError(f"team {team!r}: lower-case letters, digits, - and _ only")
    cleaned = tuple(sorted({x.strip() for x in projects if x.strip()}))
    if not cleaned:
        raise ValueError("at least one project")
    return Grant(team, cleaned, database)
