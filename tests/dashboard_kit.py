"""Grafana's part, played offline, and the stories the boards are run on.

`Board` resolves a dashboard's variables as Grafana does (each query variable's options are
what its query returns on the store; a selection is one value, several, or All; a textbox or
constant is its text), then expands every target, annotation and variable query as the
plugin does (`dashboards.interpolate`) and runs it on the real store (chDB). `cli` runs the
real `jobtrail` command in-process on the same store, so a board's figures can be compared
with what the CLI prints.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from dashboards.check import ANNOTATION_COLUMNS, COLUMNS, links, panels, targets, variables
from dashboards.interpolate import ALL, Chosen, expand
from jobtrail.store import Store

QUERIES: Counter[str] = Counter()
"""Queries run per dashboard uid in this test process (the report's count)."""


@dataclass
class Result:
    kind: str
    title: str
    ref: str
    fmt: int
    sql: str
    rows: list[dict[str, Any]]


@dataclass
class Board:
    store: Store
    board: dict[str, Any]
    start: datetime
    end: datetime
    interval_s: float = 60
    values: dict[str, Chosen] = field(default_factory=dict)

    def _query(self, sql: str) -> list[dict[str, Any]]:
        QUERIES[str(self.board["uid"])] += 1
        result = self.store.client.query(sql)
        return [dict(zip(result.column_names, r, strict=True)) for r in result.result_rows]

    def select(self, **chosen: str | Sequence[str]) -> Board:
        """Set the variables in dashboard order, each query variable's options from its
        query (with the variables before it); unset ones take the board's default."""
        self.values = {}
        for v in variables(self.board):
            name, kind = v["name"], v.get("type")
            if kind in ("constant", "textbox"):
                self.values[name] = Chosen(str(chosen.get(name, v.get("query", ""))))
                continue
            sql = expand(v["query"], self.values, self.start, self.end, self.interval_s)
            rows = self._query(sql)
            options = tuple(str(next(iter(r.values()))) for r in rows)
            given = chosen.get(name)
            if given is None:
                current = (v.get("current") or {}).get("value")
                given = current if current is not None else (options[0] if options else "")
            value: str | tuple[str, ...] = given if isinstance(given, str) else tuple(given)
            if v.get("multi") and isinstance(value, str):
                value = (value,)
            self.values[name] = Chosen(value, options, v.get("allValue"))
        return self

    def run(self) -> dict[str, Result]:
        """Every target and annotation, keyed `title/refId`; checks each returns the columns
        its format needs and the fields its panel's data links read."""
        out: dict[str, Result] = {}
        needs = _link_fields(self.board)
        for kind, title, t in targets(self.board):
            sql = expand(t["rawSql"], self.values, self.start, self.end, self.interval_s)
            try:
                rows = self._query(sql)
            except Exception as exc:
                raise AssertionError(f"{self.board['uid']} {title!r} {t['refId']} at "
                                     f"{self.shown()}: {exc}\n{sql}") from None
            columns = set(self.store.client.query(f"SELECT * FROM ({sql}) LIMIT 0")
                          .column_names) if not rows else set(rows[0])
            want = ANNOTATION_COLUMNS if kind == "annotation" else COLUMNS.get(t["format"],
                                                                               set())
            assert want <= columns, f"{title}: missing {want - columns}"
            assert needs.get(title, set()) <= columns, \
                f"{title}: its links read {needs[title] - columns}"
            out[f"{title}/{t['refId']}"] = Result(kind, title, t["refId"], t["format"], sql,
                                                  rows)
        return out

    def rows(self, title: str, ref: str = "A") -> list[dict[str, Any]]:
        return self.run_one(title, ref).rows

    def run_one(self, title: str, ref: str = "A") -> Result:
        for kind, name, t in targets(self.board):
            if name == title and t["refId"] == ref:
                sql = expand(t["rawSql"], self.values, self.start, self.end, self.interval_s)
                return Result(kind, name, ref, t["format"], sql, self._query(sql))
        raise KeyError(f"{self.board['uid']} has no target {title}/{ref}")

    def shown(self) -> str:
        return ", ".join(f"{k}={v.value}" for k, v in self.values.items()
                         if k != "jobtrail_url")


_FIELD = re.compile(r"\$\{__data\.fields\.(\w+)\}")


def _link_fields(board: Mapping[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in panels(board):
        for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", []):
            out.setdefault(p.get("title", ""), set()).update(_FIELD.findall(link["url"]))
    return out


def all_links(boards: Mapping[str, Mapping[str, Any]]) -> Iterator[tuple[str, str, str]]:
    for name, board in boards.items():
        for where, url in links(board):
            yield name, where, url


# --- stories ------------------------------------------------------------------------------

@dataclass
class Story:
    name: str
    store: Store
    start: datetime
    end: datetime
    topology: dict[str, Any]
    log_dir: Path
    dsn: str
    _said: dict[tuple[str, ...], str] = field(default_factory=dict, repr=False)

    def jobs(self) -> list[tuple[str, str, list[int]]]:
        rows = self.store.client.query(
            "SELECT project, job_id, groupArray(attempt) FROM job_attempts FINAL "
            "GROUP BY project, job_id ORDER BY project, job_id").result_rows
        return [(p, j, sorted(a)) for p, j, a in rows]

    def incidents(self) -> list[str]:
        return [r[0] for r in self.store.client.query(
            "SELECT incident_id FROM incidents FINAL ORDER BY opened_at, incident_id")
            .result_rows]

    def entities(self) -> list[str]:
        """What the links point the entity board at: the jobs' nodes and the incidents'
        entities and causes."""
        rows = self.store.client.query(
            "SELECT DISTINCT e FROM (SELECT arrayJoin(nodes) AS e FROM job_attempts FINAL "
            "UNION ALL SELECT entity AS e FROM incidents FINAL UNION ALL "
            "SELECT cause_entity AS e FROM incidents FINAL) WHERE e != '' ORDER BY e")
        found = [r[0] for r in rows.result_rows]
        nodes = [e for e in found if e.startswith("node-") and "/" not in e]
        return sorted(set(nodes[:3] + [e for e in found if not e.startswith("node-")
                                        or "/" in e]))

    def board(self, board: dict[str, Any]) -> Board:
        return Board(self.store, board, self.start, self.end)

    def cli(self, *args: str) -> str:
        """`jobtrail ARGS` in-process on this story's store (its database in the same chDB
        engine), with the story's topology; fails on a non-zero exit. The stores do not
        change once loaded, so each command runs once."""
        if args in self._said:
            return self._said[args]
        dsn = self.dsn
        topology = self.log_dir / "topology.yaml"
        if not topology.exists():
            topology.write_text(yaml.safe_dump(self.topology))
        result = CliRunner().invoke(
            _main(), ["--home", str(self.log_dir / "home"), *args],
            env={"JOBTRAIL_CLICKHOUSE": dsn, "JOBTRAIL_DATABASE": self.store.database,
                 "JOBTRAIL_TOPOLOGY": str(topology), "JOBTRAIL_KAFKA": ""},
            catch_exceptions=False)
        assert result.exit_code == 0, f"jobtrail {' '.join(args)}: {result.output}"
        self._said[args] = result.output
        return result.output

    def cli_json(self, *args: str) -> Any:
        return json.loads(self.cli(*args))

    def cli_lines(self, *args: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.cli(*args).splitlines() if line.strip()]


def _main() -> Any:
    from jobtrail.cli.main import main

    return main


STORIES = ["demo", "loss-held-then-queued", "ecc-uncorrectable", "crash-loop-bad-node",
           "leaf-breaks-five-jobs", "node-down-and-requeue-in-the-same-second",
           "two-gpus-fail-at-the-same-second", "planned-work-is-not-a-fault", "two-projects"]
"""The demo (`jobtrail demo`, plus people acknowledging, mitigating and resolving its worst
incident), library scenarios chosen for what breaks dashboards (an attempt that never waited,
one still running, one still waiting, five jobs in one incident, a node down and back, two
jobs recovering, planned work announced as a change), and two projects sharing a node
(isolation)."""


def load(name: str, chdb_path: Path, work: Path) -> Story:
    from jobtrail.learn import sample
    from jobtrail.learn.scenarios import library, wiring
    from jobtrail.learn.scenarios import load as load_scenario
    from jobtrail.learn.scenarios import topology as scenario_topology
    from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
    from jobtrail.runtime.sink import Sink
    from processors.pipeline import Pipeline
    from processors.topology import Topology
    from schemas.topology import TopologyFile

    store = Store.connect(f"chdb://{chdb_path}", f"t_{uuid.uuid4().hex[:12]}")
    store.migrate()
    work.mkdir(parents=True, exist_ok=True)
    if name in ("demo", "two-projects"):
        topology = sample.topology()
        pipeline = Pipeline(timedelta(seconds=30),
                            Topology.from_file(TopologyFile.model_validate(topology)))
        events = _demo() if name == "demo" else _two_projects()
    else:
        (path,) = [p for p in library() if p.stem == name]
        scenario = load_scenario(path)
        topology = scenario_topology(scenario)
        pipeline = Pipeline(timedelta(seconds=30), wiring(scenario), rules=scenario.rules)
        events = scenario.events
    runner = EmbeddedRunner(Sink(store, pipeline), EmbeddedLog(work / "log"))
    runner.submit(events)
    runner.drain()
    if name == "demo":
        _respond(runner, store)
    times = [e.time for e in events if hasattr(e, "time")]
    end = max(times) + timedelta(minutes=5)
    _draft(runner, store, end)
    return Story(name, store, min(times) - timedelta(hours=1), end, topology, work,
                 f"chdb://{chdb_path}")


def _demo() -> list[Any]:
    from ingest.canonical import decode
    from jobtrail.learn import sample
    from tests.conftest import OBSERVED

    return list(decode(sample.jsonl(), producer="sample", observed_at=OBSERVED))


def _respond(runner: Any, store: Store) -> None:
    """A person acknowledges, mitigates and resolves the demo's worst incident."""
    from processors.incidents.model import Actor, Command

    worst = max(store.incidents(None), key=lambda r: r["lost_gpu_hours"])
    opened = worst["opened_at"].replace(tzinfo=UTC)
    for n, (command, minutes) in enumerate([("ack", 4), ("mitigate", 9), ("resolve", 50)]):
        runner.sink.command(Command(
            command_id=f"demo-{command}", incident_id=worst["incident_id"],
            command=command, actor=Actor(kind="person", name="oncall-ana"),  # type: ignore[arg-type]
            time=opened + timedelta(minutes=minutes, seconds=n)))


def _draft(runner: Any, store: Store, at: datetime) -> None:
    """Every incident's postmortem drafted (`jobtrail postmortem draft`), so the CLI prints
    its response times."""
    from processors.incidents.model import Actor, Command

    for row in store.incidents(None, infrastructure=True):
        runner.sink.command(Command(
            command_id=f"draft-{row['incident_id']}", incident_id=row["incident_id"],
            command="draft_postmortem", actor=Actor(kind="person", name="ic-ana"),
            time=at, data={"owner": "ic-ana"}))


def _two_projects() -> list[Any]:
    """Two projects' jobs on node-001 (and one each on their own node) hit by an Xid."""
    from tests.processors.incident_kit import at, ev, started, step

    return [started("a", 1, at(0), ["node-001", "node-002"]),
            started("b", 1, at(0), ["node-001", "node-003"], project="other"),
            step("a", 1, at(2), 100), ev("job.step", at(2), job="b", attempt=1,
                                         project="other", entity="rank-0",
                                         attributes={"step": 40}),
            ev("node.xid", at(5), scope="gpu", entity="node-001/gpu0", node="node-001",
               attributes={"xid": 79}),
            ev("job.worker_exited", at(5, 2), job="a", attempt=1, node="node-001",
               attributes={"rank": 0, "exit_code": 1}),
            ev("job.worker_exited", at(5, 2), job="b", attempt=1, project="other",
               node="node-001", attributes={"rank": 0, "exit_code": 1}),
            ev("node.drained", at(6), scope="node", entity="node-001", node="node-001",
               attributes={"reason": "Xid 79"})]


def ts(value: Any) -> datetime:
    """A time as the store or the CLI's JSON gives it, as an aware UTC datetime."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


__all__ = ["ALL", "QUERIES", "STORIES", "Board", "Result", "Story", "all_links", "load", "ts"]
