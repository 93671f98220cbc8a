"""Subscriptions, silences, the notification outbox and deliveries in ClickHouse
(schemas/clickhouse/0007_alerts.sql), over the service's `Store` connection."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from processors.notify.model import Decision, Silence, Subscription

NOTIFICATION_COLUMNS = ["id", "subscription_id", "incident_id", "transition", "key", "seq",
                        "time", "not_before", "status", "reason", "digest_key", "folded",
                        "severity", "labels", "decided_at", "revision"]
DELIVERY_COLUMNS = ["notification_id", "subscription_id", "attempt", "at", "status", "code",
                    "latency_ms", "error", "next_at", "channel", "message_ids"]
DONE = ("sent", "gave_up", "gone", "cancelled")
"""Delivery outcomes after which a notification is not attempted again."""
STATES = ("pending", "retrying", "delivered", "gave_up", "gone", "cancelled", "suppressed")
"""What `notifications` says happened to a notification: a pending decision is `pending`
until an attempt, `retrying` after a failed one, `delivered` once one was sent; or how it
ended (gave up, the receiver gone, cancelled); a decision not to send shows as decided."""


def _visible(projects: Sequence[str] | None, owned: Sequence[str]) -> bool:
    """A caller bound to `projects` sees a subscription bound to a subset of them."""
    return projects is None or (bool(owned) and set(owned) <= set(projects))


class AlertStore:
    def __init__(self, store: Any) -> None:
        self.store = store
        self.client = store.client
        self.db = store.database

    def _insert(self, table: str, rows: list[list[Any]], columns: list[str]) -> None:
        if rows:
            self.store.retry.run(lambda: self.client.insert(f"{self.db}.{table}", rows,
                                                            column_names=columns))

    # --- subscriptions and silences ----------------------------------------------------

    def put_subscription(self, sub: Subscription, by: str) -> Subscription:
        old = self.subscription(sub.id, None, include_deleted=True)
        version = (old[1] if old else 0) + 1
        sub = sub.model_copy(update={"version": version})
        self._insert("subscriptions", [[sub.id, version, sub.owner, list(sub.projects),
                                        sub.model_dump_json(), 0, datetime.now(UTC), by]],
                     ["id", "version", "owner", "projects", "spec", "deleted", "updated_at",
                      "updated_by"])
        return sub

    def delete_subscription(self, sub: Subscription, by: str) -> None:
        old = self.subscription(sub.id, None, include_deleted=True)
        version = (old[1] if old else 0) + 1
        self._insert("subscriptions", [[sub.id, version, sub.owner, list(sub.projects),
                                        sub.model_dump_json(), 1, datetime.now(UTC), by]],
                     ["id", "version", "owner", "projects", "spec", "deleted", "updated_at",
                      "updated_by"])

    def subscription(self, sub_id: str, projects: Sequence[str] | None, *,
                     include_deleted: bool = False) -> tuple[Subscription, int] | None:
        rows = self.store._dicts(
            "SELECT spec, version, deleted, projects FROM subscriptions FINAL "
            "WHERE id = {id:String}", id=sub_id)
        if not rows or (rows[0]["deleted"] and not include_deleted):
            return None
        if not _visible(projects, rows[0]["projects"]):
            return None
        sub = Subscription.model_validate_json(rows[0]["spec"])
        return sub.model_copy(update={"version": rows[0]["version"]}), int(rows[0]["version"])

    def subscriptions(self, projects: Sequence[str] | None = None) -> list[Subscription]:
        rows = self.store._dicts("SELECT spec, version, projects FROM subscriptions FINAL "
                                 "WHERE deleted = 0 ORDER BY id")
        return [Subscription.model_validate_json(r["spec"]).model_copy(
                    update={"version": r["version"]})
                for r in rows if _visible(projects, r["projects"])]

    def put_silence(self, silence: Silence, by: str) -> None:
        rows = self.store._dicts("SELECT max(version) AS v FROM silences WHERE id = {id:String}",
                                 id=silence.id)
        version = int(rows[0]["v"] or 0) + 1 if rows else 1
        self._insert("silences", [[silence.id, version, list(silence.projects),
                                   silence.model_dump_json(), 0, datetime.now(UTC), by]],
                     ["id", "version", "projects", "spec", "deleted", "updated_at",
                      "updated_by"])

    def silences(self, projects: Sequence[str] | None = None) -> list[Silence]:
        rows = self.store._dicts("SELECT spec, projects FROM silences FINAL WHERE deleted = 0 "
                                 "ORDER BY id")
        return [Silence.model_validate_json(r["spec"]) for r in rows
                if _visible(projects, r["projects"])]

    # --- the outbox ------------------------------------------------------------------------

    def decisions(self, incidents: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        rows = self.store._dicts(
            "SELECT id, incident_id, status, not_before, reason, digest_key, folded "
            "FROM notifications FINAL WHERE {all:Bool} OR incident_id IN {ids:Array(String)}",
            all=incidents is None, ids=list(incidents or []))
        return {r["id"]: r for r in rows}

    def changed_since(self, since: datetime) -> list[str]:
        """Incidents whose log grew after `since` (stored time), and the open,
        unacknowledged sev1s (their reminders depend on the clock)."""
        rows = self.store._dicts(
            "SELECT DISTINCT incident_id FROM incident_log WHERE recorded_at > "
            "{since:DateTime64(3, 'UTC')} UNION DISTINCT SELECT incident_id FROM incidents "
            "FINAL WHERE severity = 'sev1' AND status NOT IN ('resolved', 'closed') "
            "AND acknowledged_at IS NULL AND mitigated_at IS NULL", since=since)
        return sorted(r["incident_id"] for r in rows)

    def seen_at(self, incidents: Sequence[str] | None = None) -> dict[str, datetime]:
        """When jobtrail first recorded each incident (its log's first `recorded_at`, wall
        clock): a backfill of last week's events is seen today."""
        rows = self.store._dicts(
            "SELECT incident_id, min(recorded_at) AS seen FROM incident_log "
            "WHERE {all:Bool} OR incident_id IN {ids:Array(String)} GROUP BY incident_id",
            all=incidents is None, ids=list(incidents or []))
        return {str(r["incident_id"]): r["seen"] if r["seen"].tzinfo else
                r["seen"].replace(tzinfo=UTC) for r in rows}

    def watermark(self) -> datetime | None:
        rows = self.store._dicts("SELECT max(time) AS t, count() AS n FROM incident_log")
        return rows[0]["t"] if rows and rows[0]["n"] else None

    def write_decisions(self, decisions: Sequence[Decision],
                        incidents: Sequence[str] | None = None) -> int:
        """Insert the decisions that are new or changed (never one already delivered);
        a pending one no longer decided for `incidents` (None: all) is withdrawn. Returns
        how many rows were written."""
        known = self.decisions(incidents)
        delivered = self.finished(ids=list(known))
        now = datetime.now(UTC)
        revision = int(now.timestamp() * 1000)
        rows = []
        fresh = {d.id for d in decisions}
        for old_id, stored in known.items():  # decided before, not any more: withdrawn
            if old_id in fresh or stored["status"] != "pending" or old_id in delivered:
                continue
            rows.append(self._withdrawn(old_id, now, revision))
        for d in decisions:
            old = known.get(d.id)
            if old is not None and (d.id in delivered or (
                    old["status"], old["not_before"], old["reason"], old["digest_key"],
                    tuple(old["folded"])) == (d.status, d.not_before, d.reason, d.digest_key,
                                              d.folded)):
                continue
            rows.append([d.id, d.subscription_id, d.incident_id, d.transition, d.key, d.seq,
                         d.time, d.not_before, d.status, d.reason, d.digest_key,
                         list(d.folded), d.severity,
                         json.dumps({k: list(v) for k, v in d.labels.items()}), now,
                         revision])
        self._insert("notifications", rows, NOTIFICATION_COLUMNS)
        return len(rows)

    def _withdrawn(self, notification_id: str, now: datetime, revision: int) -> list[Any]:
        row = self.store._dicts("SELECT * FROM notifications FINAL WHERE id = {id:String}",
                                id=notification_id)[0]
        row.update(status="suppressed", reason="withdrawn: no longer decided from the log",
                   decided_at=now, revision=revision)
        return [row[c] for c in NOTIFICATION_COLUMNS]

    def notifications(self, *, subscription: str = "", status: str = "",
                      limit: int = 1000) -> list[dict[str, Any]]:
        """The outbox with what its deliveries did: `status` is the decision's (pending,
        suppressed, ...), `state` what happened to it (`STATES`), with the last attempt's
        number and time. `status` filters on either."""
        return self.store._dicts(  # type: ignore[no-any-return]
            "SELECT n.*, d.attempts AS attempts, d.last_at AS last_attempt_at, "
            "multiIf(n.status != 'pending', n.status, d.last = 'sent', 'delivered', "
            "d.last = 'failed', 'retrying', d.last IN ('gave_up', 'gone', 'cancelled'), d.last, "
            "'pending') AS state "
            "FROM (SELECT * FROM notifications FINAL WHERE ({sub:String} = '' OR "
            "subscription_id = {sub:String})) AS n "
            "LEFT JOIN (SELECT notification_id, argMax(status, attempt) AS last, "
            "max(attempt) AS attempts, argMax(at, attempt) AS last_at FROM deliveries "
            "GROUP BY notification_id) AS d ON d.notification_id = n.id "
            "WHERE {status:String} = '' OR n.status = {status:String} OR state = {status:String} "
            "ORDER BY n.not_before, n.id LIMIT {limit:UInt32}", sub=subscription, status=status,
            limit=limit)

    def due(self, now: datetime) -> list[dict[str, Any]]:
        """Pending notifications whose time has come and that are not finished."""
        return self.store._dicts(  # type: ignore[no-any-return]
            "SELECT * FROM notifications FINAL WHERE status = 'pending' AND not_before <= "
            "{now:DateTime64(3, 'UTC')} AND id NOT IN (SELECT notification_id FROM deliveries "
            "GROUP BY notification_id HAVING argMax(status, attempt) IN {done:Array(String)}) "
            "ORDER BY not_before, id",
            now=now, done=list(DONE))

    # --- deliveries --------------------------------------------------------------------

    def finished(self, ids: Sequence[str] | None = None) -> set[str]:
        rows = self.store._dicts(
            "SELECT notification_id FROM deliveries WHERE ({all:Bool} OR notification_id IN "
            "{ids:Array(String)}) GROUP BY notification_id "
            "HAVING argMax(status, attempt) IN {done:Array(String)}",
            done=list(DONE), all=ids is None, ids=list(ids or []))
        return {r["notification_id"] for r in rows}

    def last_attempts(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not ids:
            return {}
        rows = self.store._dicts(
            "SELECT notification_id, max(d.attempt) AS last, "
            "argMax(d.next_at, d.attempt) AS next_at, min(d.at) AS first_at FROM deliveries AS d "
            "WHERE notification_id IN {ids:Array(String)} GROUP BY notification_id",
            ids=list(ids))
        return {r["notification_id"]: r for r in rows}

    def record(self, attempts: Sequence[Any]) -> None:
        self._insert("deliveries", [[getattr(a, c) for c in DELIVERY_COLUMNS]
                                    for a in attempts], DELIVERY_COLUMNS)

    def deliveries(self, projects: Sequence[str] | None = None, *, subscription: str = "",
                   notification: str = "", limit: int = 200) -> list[dict[str, Any]]:
        visible = None if projects is None else [s.id for s in self.subscriptions(projects)]
        return self.store._dicts(  # type: ignore[no-any-return]
            "SELECT * FROM deliveries FINAL WHERE ({all:Bool} OR subscription_id IN "
            "{subs:Array(String)}) AND ({sub:String} = '' OR subscription_id = {sub:String}) "
            "AND ({ntf:String} = '' OR notification_id = {ntf:String}) "
            "ORDER BY at DESC, notification_id LIMIT {limit:UInt32}",
            all=visible is None, subs=visible or [], sub=subscription, ntf=notification,
            limit=limit)

    def reset(self, notification_id: str) -> None:
        """Redeliver: the next pass sends it again (a new attempt row after the last)."""
        last = self.last_attempts([notification_id]).get(notification_id)
        attempt = int(last["last"]) + 1 if last else 1
        self.record([_Row(notification_id, "", attempt, datetime.now(UTC), "redeliver", 0, 0,
                          "", None, "", [])])


class _Row:
    def __init__(self, *values: Any) -> None:
        for name, value in zip(DELIVERY_COLUMNS, values, strict=True):
            setattr(self, name, value)


def decision_dict(d: Decision) -> dict[str, Any]:
    out = asdict(d)
    out["labels"] = {k: list(v) for k, v in d.labels.items()}
    return out
