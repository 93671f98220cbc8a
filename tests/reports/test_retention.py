"""History by policy on chDB: each class expires after its days and nothing else goes; an
incident under postmortem is held; the cluster form of every TTL parses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
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


# --- what the engine can hold, and changes of policy on an existing store ---------------------

def _events(store: Store, ages: dict[str, float | datetime]) -> None:
    """Rows of every raw-events and timeline table, dated `ages` (days ago, or a time)."""
    def when(age: float | datetime) -> datetime:
        return age if isinstance(age, datetime) else _ago(age)
    _put(store, "events", [{"id": i, "time": when(a), "project": "p", "type": "job.step"}
                           for i, a in ages.items()])
    _put(store, "event_ids", [{"id": i, "time": when(a), "arrival": "x"}
                              for i, a in ages.items()])
    _put(store, "job_timeline", [{"project": "p", "job_id": i, "time": when(a), "event_id": i}
                                 for i, a in ages.items()])


def _merged(store: Store) -> dict[str, list[str]]:
    for table in ("events", "event_ids", "job_timeline"):
        store.client.command(f"OPTIMIZE TABLE {store.database}.{table} FINAL")
    return {"events": _ids(store, "events", "id"), "event_ids": _ids(store, "event_ids", "id"),
            "job_timeline": _ids(store, "job_timeline", "job_id")}


@pytest.mark.parametrize("days", [1, 30, 29000, 30000, 36500])
def test_rows_younger_than_the_policy_survive_a_merge_whatever_its_length(
        store: Store, days: int) -> None:
    """29000 days wrapped `toDateTime(time) + INTERVAL` past 2106 to 1970: every row went."""
    retention.apply(store, RetentionPolicy(raw_events=days, timelines=days))
    _events(store, {"young": days - 0.5, "new": 0, "old": days + 1,
                    "future": datetime(2150, 1, 1, tzinfo=UTC),  # kept: expiry held at 2106
                    "far": datetime(2200, 12, 31, tzinfo=UTC)})
    kept = ["far", "future", "new", "young"]
    assert _merged(store) == {"events": kept, "event_ids": kept, "job_timeline": kept}


def test_a_retention_the_engine_cannot_hold_is_refused_and_forever_is_zero() -> None:
    key = "JOBTRAIL_RETENTION_RAW_EVENTS_DAYS"
    for bad in ("36501", "100000", "1e3", "nan", "inf", "-1", "30.5", "a month"):
        with pytest.raises(ValueError, match=f"^{key}: a whole number of days from 1 to 36500"):
            Settings.from_env({key: bad})
    assert Settings.from_env({key: "forever"}).retention.raw_events == 0
    assert Settings.from_env({key: "36500"}).retention.raw_events == 36500
    with pytest.raises(ValueError, match=key):
        RetentionPolicy(raw_events=36501)
    with pytest.raises(ValueError, match="JOBTRAIL_RETENTION_DELIVERIES_DAYS"):
        RetentionPolicy(deliveries=-1)


def test_a_change_of_policy_deletes_no_row_the_new_policy_keeps(store: Store) -> None:
    """A part keeps the TTL dates computed when it was written; a merge drops a part whose
    stored dates have passed without evaluating the TTL in force. TTL merges are stopped
    here while the rows are written, so their parts hold the old policy's dates by
    construction (as parts written hours before a change do)."""
    tables = ("events", "event_ids", "job_timeline")

    def ttl_merges(verb: str) -> None:
        for table in tables:
            store.client.command(f"SYSTEM {verb} TTL MERGES {store.database}.{table}")

    def write_under(policy: RetentionPolicy, ages: dict[str, float]) -> None:
        retention.apply(store, policy)
        ttl_merges("STOP")
        _events(store, ages)

    def change(policy: RetentionPolicy) -> list[str]:
        statements = retention.apply(store, policy)
        ttl_merges("START")  # whatever apply did, merges with TTL run from here
        return statements

    def everywhere(ids: list[str]) -> dict[str, list[str]]:
        return {"events": ids, "event_ids": ids, "job_timeline": ids}

    # lengthened: 30 -> 365 days; the 40-day rows' parts were due under 30 days
    write_under(RetentionPolicy(raw_events=30, timelines=30), {"d40": 40, "d10": 10,
                                                                "d400": 400})
    changed = change(RetentionPolicy(raw_events=365, timelines=365))
    assert _merged(store) == everywhere(["d10", "d40"])
    assert [s.split()[2].split(".")[1] for s in changed] == ["events", "event_ids",
                                                             "job_timeline", "job_attempts"]
    # shortened: 365 -> 30 days, applied at the next merge (no --materialize needed)
    change(RetentionPolicy(raw_events=30, timelines=30))
    assert _merged(store) == everywhere(["d10"])
    # removed (kept forever): nothing goes, whatever the parts' stored dates
    write_under(RetentionPolicy(raw_events=30, timelines=30), {"d50": 50})
    change(RetentionPolicy())
    assert _merged(store) == everywhere(["d10", "d50"])
    # a store that carries the wrapped TTL of the old expression (29000 days): the first
    # start with the saturating one recomputes the parts it wrote, which then survive
    ttl_merges("STOP")
    for table in tables:
        store.client.command(f"ALTER TABLE {store.database}.{table} MODIFY TTL "
                             "toDateTime(time) + INTERVAL 29000 DAY",
                             settings={"materialize_ttl_after_modify": 0})
    _events(store, {"d1": 1})
    change(RetentionPolicy(raw_events=29000, timelines=29000))
    assert _merged(store) == everywhere(["d1", "d10", "d50"])
    # an unchanged policy alters nothing
    assert change(RetentionPolicy(raw_events=29000, timelines=29000)) == []


def test_report_retention_materializes_the_tables_that_have_a_ttl(tmp_path: Path) -> None:
    """36500 days with --materialize failed: 'Cannot MATERIALIZE TTL as there is no TTL set
    for table jobtrail.incidents' (every governed table was materialized). Its own process:
    chDB opens one engine path per process."""
    from tests.trust_kit import cli

    run = cli(tmp_path / "home", "report", "retention", "--materialize", check=False,
              env={"JOBTRAIL_RETENTION_RAW_EVENTS_DAYS": "36500"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "raw_events: 36500 days" in run.stdout
    assert "incidents: kept forever" in run.stdout
