"""History by policy on chDB: each class expires after its days and nothing else goes; an
incident under postmortem is held; the cluster form of every TTL parses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobtrail.config import Settings
from jobtrail.reports import retention
from jobtrail.reports.retention import RetentionPolicy
from jobtrail.store import Store

POLICY = RetentionPolicy(raw_events=30, timelines=60, dead_letters=7, incidents=90,
                         postmortems=365, deliveries=14)
NOW = datetime.now(UTC).replace(microsecond=0)


def _ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


def _put(store: Store, table: str, rows: list[dict[str, Any]]) -> None:
    lines = "\n".join(json.dumps(r, default=str) for r in rows)
    store.client.command(  # recorded_at is MATERIALIZED: backdating it needs its name
        f"INSERT INTO {store.database}.{table} ({', '.join(rows[0])}) SETTINGS "
        "insert_allow_materialized_columns = 1, date_time_input_format = 'best_effort' "
        f"FORMAT JSONEachRow\n{lines}")


def _ids(store: Store, table: str, column: str) -> list[str]:
    return sorted(r[0] for r in store.client.query(
        f"SELECT {column} FROM {store.database}.{table}").result_rows)


def test_policy_from_env_names_the_key() -> None:
    env = {f"JOBTRAIL_RETENTION_{c.upper()}_DAYS": str(d) for c, d in POLICY.as_dict().items()}
    assert Settings.from_env(env).retention == POLICY
    assert Settings.from_env({}).retention == RetentionPolicy()
    with pytest.raises(ValueError, match="JOBTRAIL_RETENTION_RAW_EVENTS_DAYS"):
        RetentionPolicy.from_env({"JOBTRAIL_RETENTION_RAW_EVENTS_DAYS": "a month"})
    with pytest.raises(ValueError, match="POSTMORTEMS"):
        RetentionPolicy.from_env({"JOBTRAIL_RETENTION_INCIDENTS_DAYS": "90",
                                  "JOBTRAIL_RETENTION_POSTMORTEMS_DAYS": "30"})


def _fixture(store: Store) -> None:
    _put(store, "events", [{"id": i, "time": _ago(d), "project": "p", "type": "job.step"}
                           for i, d in (("ev-31d", 31), ("ev-29d", 29))])
    _put(store, "job_timeline", [{"project": "p", "job_id": j, "time": _ago(d),
                                  "event_id": j} for j, d in (("tl-61d", 61), ("tl-59d", 59))])
    _put(store, "job_attempts", [{"project": "p", "job_id": j, "attempt": 1, "version": 1,
                                  "submitted_at": None if d is None else _ago(d)}
                                 for j, d in (("ja-61d", 61), ("ja-59d", 59), ("ja-none", None))])
    _put(store, "dead_letters", [{"id": i, "received_at": _ago(d), "stage": "parse"}
                                 for i, d in (("dl-8d", 8), ("dl-6d", 6))])
    _put(store, "deliveries", [{"notification_id": i, "at": _ago(d), "attempt": 1}
                               for i, d in (("dv-15d", 15), ("dv-13d", 13))])
    old = _ago(500)
    incidents = [  # (id, version, status, closed days ago, postmortem status)
        ("A", 1, "open", None, ""), ("A", 2, "closed", 100, ""),  # closed past 90 d: goes
        ("B", 2, "closed", 100, "draft"),        # under postmortem: held
        ("C", 2, "closed", 100, "published"),    # published postmortem, within 365 d
        ("D", 2, "closed", 400, "published"),    # published, past 365 d: goes
        ("E", 1, "open", None, ""),              # open: kept
        ("F", 2, "closed", 80, ""),              # closed within 90 d
        ("G", 2, "resolved", None, ""),          # resolved, never closed: kept
    ]
    _put(store, "incidents", [{"incident_id": i, "version": v, "status": s,
                               "closed_at": None if c is None else _ago(c),
                               "postmortem_status": pm, "recorded_at": old}
                              for i, v, s, c, pm in incidents])
    _put(store, "incident_retention", [{"incident_id": i, "version": v, "status": s,
                                        "closed_at": None if c is None else _ago(c),
                                        "postmortem_status": pm}
                                       for i, v, s, c, pm in incidents])
    ids = sorted({i for i, *_ in incidents})
    _put(store, "incident_log", [{"id": f"{i}/1", "incident_id": i, "time": old,
                                  "recorded_at": old} for i in ids]
         + [{"id": "Y/1", "incident_id": "Y", "time": old, "recorded_at": old},  # orphan: goes
            {"id": "Z/1", "incident_id": "Z", "time": _ago(1),  # not projected yet: young
             "recorded_at": _ago(1)}])
    for table in ("incident_evidence", "incident_jobs", "actions"):
        key = {"incident_evidence": "event_id", "incident_jobs": "job_id",
               "actions": "action_id"}[table]
        _put(store, table, [{"incident_id": i, key: f"{i}-x", "recorded_at": old}
                            for i in ids])


def test_expiry_removes_what_the_policy_says_and_nothing_else(store: Store) -> None:
    _fixture(store)
    # parts written under another TTL keep its dates until the TTL is materialized
    statements = retention.apply(store, POLICY, materialize=True)
    assert len(statements) == 12
    for table in ("events", "job_timeline", "job_attempts", "dead_letters", "deliveries",
                  *retention.INCIDENT_TABLES):
        store.client.command(f"OPTIMIZE TABLE {store.database}.{table} FINAL")
    assert _ids(store, "events", "id") == ["ev-29d"]
    assert _ids(store, "job_timeline", "job_id") == ["tl-59d"]
    assert _ids(store, "job_attempts", "job_id") == ["ja-59d", "ja-none"]
    assert _ids(store, "dead_letters", "id") == ["dl-6d"]
    assert _ids(store, "deliveries", "notification_id") == ["dv-13d"]
    kept = ["B", "C", "E", "F", "G"]
    assert _ids(store, "incidents", "incident_id") == kept
    assert _ids(store, "incident_log", "incident_id") == [*kept, "Z"]
    for table in ("incident_evidence", "incident_jobs", "actions"):
        assert _ids(store, table, "incident_id") == kept, table
    # the replay semantics: an event already past its retention is gone by the next merge
    # (ClickHouse may also drop it at insert): replaying old history does not bring it back
    _put(store, "events", [{"id": "ev-replayed-40d", "time": _ago(40), "project": "p",
                            "type": "job.step"}])
    store.client.command(f"OPTIMIZE TABLE {store.database}.events FINAL")
    assert _ids(store, "events", "id") == ["ev-29d"]
    # lifting the policy removes the TTLs (kept forever), re-applying is idempotent
    assert retention.apply(store, RetentionPolicy(deliveries=0)) == [
        f"ALTER TABLE {store.database}.{t} REMOVE TTL" for t in retention.ttl_clauses(
            POLICY, store.database)]
    assert retention.apply(store, RetentionPolicy(deliveries=0)) == []


def test_cluster_ttls_parse_and_target_the_local_tables(store: Store) -> None:
    statements = retention.retention_statements(POLICY, database="jobtrail", cluster="prod")
    assert len(statements) == 12
    for statement in statements:
        assert "_local ON CLUSTER prod MODIFY TTL" in statement
        formatted = store.client.query("SELECT formatQuery({q:String})",
                                       parameters={"q": statement}).result_rows[0][0]
        assert "ON CLUSTER prod" in formatted
    assert retention.retention_statements(RetentionPolicy(), database="jobtrail",
                                          cluster="prod") == [
        "ALTER TABLE jobtrail.notifications_local ON CLUSTER prod MODIFY TTL "
        f"{retention.expiry('decided_at', 90)}",
        "ALTER TABLE jobtrail.deliveries_local ON CLUSTER prod MODIFY TTL "
        f"{retention.expiry('at', 90)}"]
    with pytest.raises(ValueError):
        retention.retention_statements(POLICY, database="x; DROP", cluster="")
