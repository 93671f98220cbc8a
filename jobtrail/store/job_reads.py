"""A job's reads in ClickHouse, bound to the caller's project(s): its attempts, its
cross-system timeline, the attempts running on a node or filesystem at a time, its checkpoints,
and what happened on an entity (a `Store` part, split from store/core.py by concern; the
questions in `store/queries.py`, the CLI and the API read through these).

Every read binds the project(s) as server-side parameters; no user input is formatted into SQL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from jobtrail.store.rows import ATTEMPT_COLUMNS, attempt_from_row
from processors.attempts import Attempt


class JobTables:
    if TYPE_CHECKING:
        def _dicts(self, sql: str, **parameters: Any) -> list[dict[str, Any]]: ...

    def attempts(self, project: str, job_id: str) -> list[Attempt]:
        rows = self._dicts(
            f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM job_attempts FINAL "
            "WHERE project = {project:String} AND job_id = {job_id:String} ORDER BY attempt",
            project=project, job_id=job_id)
        return [attempt_from_row(r) for r in rows]

    def timeline(self, project: str, job_id: str, *, attempt: int | None = None,
                 since: datetime | None = None, until: datetime | None = None,
                 limit: int = 10_000, source: str = "", offset: int = 0,
                 ) -> list[dict[str, Any]]:
        """The job's cross-system timeline, oldest first, bound to the caller's project
        (`source` keeps one source's rows; `offset` skips that many, for pages)."""
        rows = self._dicts(
            "SELECT time, attempt, event_id, source, type, severity, relation, entity, "
            "link_path, scope, node, message, attributes FROM job_timeline FINAL "
            "WHERE project = {project:String} AND job_id = {job_id:String} "
            "AND ({attempt:Int64} < 0 OR attempt = {attempt:Int64}) "
            "AND ({source:String} = '' OR source = {source:String}) "
            "AND time >= {since:DateTime64(3, 'UTC')} AND time <= {until:DateTime64(3, 'UTC')} "
            "ORDER BY time, event_id, attempt LIMIT {limit:UInt32} OFFSET {offset:UInt64}",
            project=project, job_id=job_id, attempt=-1 if attempt is None else attempt,
            since=since or datetime(1970, 1, 1, tzinfo=UTC), source=source, offset=offset,
            until=until or datetime(2200, 1, 1, tzinfo=UTC), limit=limit)
        for row in rows:
            row["attributes"] = json.loads(row["attributes"] or "{}")
        return rows

    def attempts_at(self, projects: Sequence[str], at: datetime, *,
                    nodes: Sequence[str] = (), filesystem: str = "",
                    cluster: str = "") -> list[Attempt]:
        """Attempts of `projects` running at `at` on any of `nodes` or mounting `filesystem`
        (in `cluster` when given: two clusters can both have a `node-001`)."""
        rows = self._dicts(
            f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM job_attempts FINAL "
            "WHERE project IN {projects:Array(String)} "
            "AND ({cluster:String} = '' OR cluster = {cluster:String}) "
            "AND started_at <= {at:DateTime64(3, 'UTC')} "
            "AND (ended_at IS NULL OR ended_at >= {at:DateTime64(3, 'UTC')}) "
            "AND (hasAny(nodes, {nodes:Array(String)}) OR ({fs:String} != '' AND "
            "arrayExists(m -> splitByChar(':', m)[1] = {fs:String}, mounts))) "
            "ORDER BY project, job_id, attempt",
            projects=list(projects), at=at, nodes=list(nodes), fs=filesystem, cluster=cluster)
        return [attempt_from_row(r) for r in rows]

    def checkpoints(self, project: str, job_id: str, attempt: int) -> list[dict[str, Any]]:
        """Checkpoints saved or restored by one attempt, with step and path."""
        return self._dicts(
            "SELECT time, type, JSONExtractInt(attributes, 'step') AS step, "
            "JSONExtractString(attributes, 'path') AS path FROM job_timeline FINAL "
            "WHERE project = {project:String} AND job_id = {job_id:String} "
            "AND attempt = {attempt:UInt32} AND type LIKE 'checkpoint.%' ORDER BY time",
            project=project, job_id=job_id, attempt=attempt)

    def entity_timeline(self, projects: Sequence[str], entity: str, *,
                        since: datetime | None = None, until: datetime | None = None,
                        limit: int = 10_000, cluster: str = "") -> list[dict[str, Any]]:
        """What happened on an entity (node, GPU, NIC, switch, port, filesystem, target):
        cluster-level events, plus job events of the caller's projects only; in `cluster`
        when given (each row says its cluster: two clusters' `node-001` are told apart).

        Not `FINAL`: the rows `events` can hold twice are a replayed batch's, byte for byte
        the same (a re-send with other content is dead-lettered, not stored), so `LIMIT 1 BY
        id` on the few rows that match is exact, where `FINAL` merged every row of the time
        range first (4x slower on 25 M events, bench/queries.py). The attributes are parsed
        only for rows whose text names the entity."""
        return self._dicts(
            "SELECT time, id, cluster, source, type, severity, project, job_id, scope, entity, "
            "node, message FROM events "
            "WHERE (entity = {e:String} OR node = {e:String} OR startsWith(entity, {p:String}) "
            "OR (position(attributes, {e:String}) > 0 "
            "AND (JSONExtractString(attributes, 'switch') = {e:String} "
            "OR JSONExtractString(attributes, 'filesystem') = {e:String}))) "
            "AND (project = '' OR project IN {projects:Array(String)}) "
            "AND ({cluster:String} = '' OR cluster = {cluster:String}) "
            "AND time >= {since:DateTime64(3, 'UTC')} AND time <= {until:DateTime64(3, 'UTC')} "
            "ORDER BY time, id LIMIT 1 BY id LIMIT {limit:UInt32}",
            e=entity, p=f"{entity}/", projects=list(projects), cluster=cluster,
            since=since or datetime(1970, 1, 1, tzinfo=UTC),
            until=until or datetime(2200, 1, 1, tzinfo=UTC), limit=limit)
