"""The publisher against a local HTTP server that records what grafana-client sends (no
Grafana runs here), and the per-team row policies checked against the real schema."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dashboards.build import built, committed
from dashboards.check import targets
from jobtrail.cli.main import main
from jobtrail.store import Store
from jobtrail.views.grafana import ROW_POLICIES, datasource_body, grant, publish
from tests.processors.incident_kit import at, ev, pipeline, started


class FakeGrafana(BaseHTTPRequestHandler):
    """Folders, data sources and dashboards in memory; every request recorded."""

    state: dict[str, Any] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.state["requests"].append((self.command, self.path, body,
                                       self.headers.get("Authorization")))
        return body

    def do_GET(self) -> None:
        self._record()
        if (m := re.fullmatch(r"/api/folders/([\w-]+)", self.path)):
            folder = self.state["folders"].get(m.group(1))
            self._reply(200, folder) if folder else self._reply(404, {"message": "not found"})
        elif (m := re.fullmatch(r"/api/datasources/uid/([\w-]+)", self.path)):
            source = self.state["datasources"].get(m.group(1))
            self._reply(200, source) if source else self._reply(404, {"message": "not found"})
        else:
            self._reply(404, {"message": self.path})

    def do_POST(self) -> None:
        body = self._record()
        if self.path == "/api/folders":
            self.state["folders"][body["uid"]] = {"uid": body["uid"], "title": body["title"]}
            self._reply(200, self.state["folders"][body["uid"]])
        elif self.path == "/api/datasources":
            self.state["datasources"][body["uid"]] = body
            self._reply(200, {"datasource": body})
        elif self.path == "/api/dashboards/db":
            self.state["dashboards"][body["dashboard"]["uid"]] = body
            self._reply(200, {"status": "success", "uid": body["dashboard"]["uid"]})
        else:
            self._reply(404, {"message": self.path})

    def do_PUT(self) -> None:
        body = self._record()
        if (m := re.fullmatch(r"/api/datasources/uid/([\w-]+)", self.path)):
            self.state["datasources"][m.group(1)] = body
            self._reply(200, {"datasource": body})
        else:
            self._reply(404, {"message": self.path})


@pytest.fixture
def grafana() -> Iterator[tuple[str, dict[str, Any]]]:
    FakeGrafana.state = {"requests": [], "folders": {}, "datasources": {}, "dashboards": {}}
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGrafana)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", FakeGrafana.state
    finally:
        server.shutdown()
        server.server_close()


def test_publish_creates_once_then_updates_in_place(grafana: tuple[str, dict[str, Any]]
                                                    ) -> None:
    url, state = grafana
    source = datasource_body(url="http://clickhouse:8123", database="jobtrail",
                             username="grafana_ro")
    first = publish(url, "sa-token-1", committed(), source)
    assert first.created == ["folder jobtrail", "datasource jobtrail-clickhouse"]
    assert sorted(first.dashboards) == ["jobtrail-entity", "jobtrail-fleet", "jobtrail-incident",
                                        "jobtrail-job", "jobtrail-oncall"]
    posted = state["dashboards"]
    assert {b["folderUid"] for b in posted.values()} == {"jobtrail"}
    assert all(b["overwrite"] is True and b["dashboard"]["id"] is None for b in posted.values())
    assert posted["jobtrail-job"]["dashboard"]["panels"] == committed()["job"]["panels"]
    assert {r[3] for r in state["requests"]} == {"Bearer sa-token-1"}
    assert "secureJsonData" not in state["datasources"]["jobtrail-clickhouse"]  # no secret sent
    state["requests"].clear()
    second = publish(url, "sa-token-1", committed(), source)
    assert second.created == []  # idempotent: nothing new
    methods = [(m, p) for m, p, _, _ in state["requests"]]
    assert ("POST", "/api/folders") not in methods and ("POST", "/api/datasources") not in methods
    assert ("PUT", "/api/datasources/uid/jobtrail-clickhouse") in methods
    # an update keeps the folder (omitting folderUid would move the dashboards to the root)
    assert [b["folderUid"] for m, p, b, _ in state["requests"]
            if p == "/api/dashboards/db"] == ["jobtrail"] * 5


def test_publish_command(grafana: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    url, state = grafana
    result = CliRunner().invoke(main, ["--home", str(tmp_path), "dashboards", "publish",
                                       "--url", url, "--no-datasource"],
                                env={"GRAFANA_TOKEN": "tok"})
    assert result.exit_code == 0, result.output
    assert ("published jobtrail-entity, jobtrail-fleet, jobtrail-incident, jobtrail-job, "
            "jobtrail-oncall") in result.output
    assert state["datasources"] == {} and len(state["dashboards"]) == 5
    sent = state["dashboards"]["jobtrail-incident"]["dashboard"]
    (url_var,) = [v for v in sent["templating"]["list"] if v["name"] == "jobtrail_url"]
    assert url_var["query"] == "http://localhost:8080"  # the committed default


def test_publish_sets_where_the_postmortem_links_point(grafana: tuple[str, dict[str, Any]],
                                                        tmp_path: Path) -> None:
    url, state = grafana
    args = ["--home", str(tmp_path), "dashboards", "publish", "--url", url, "--no-datasource"]
    bad = CliRunner().invoke(main, [*args, "--jobtrail-url", "javascript:alert(1)"],
                             env={"GRAFANA_TOKEN": "tok"})
    assert bad.exit_code != 0 and "--jobtrail-url" in bad.output and not state["dashboards"]
    result = CliRunner().invoke(main, args, env={"GRAFANA_TOKEN": "tok",
                                                 "JOBTRAIL_PUBLIC_URL": "https://jt.example/"})
    assert result.exit_code == 0, result.output
    sent = state["dashboards"]["jobtrail-incident"]["dashboard"]
    (url_var,) = [v for v in sent["templating"]["list"] if v["name"] == "jobtrail_url"]
    assert (url_var["type"], url_var["query"]) == ("constant", "https://jt.example")
    links = {link["title"]: link["url"] for link in sent["links"]}
    assert links["Postmortem review page"] == ("${jobtrail_url}/incidents/${incident}"
                                               "/postmortem")


def _tables(sql: str) -> set[str]:
    return set(re.findall(r"\b(?:FROM|(?<!ARRAY )JOIN)\s+([a-z_]+)\b", sql))


def test_every_table_grafana_reads_has_a_row_policy() -> None:
    read: set[str] = set()
    for board in built().values():
        for _, _, target in targets(board):
            read |= _tables(target["rawSql"])
        for variable in board.get("templating", {}).get("list", []):
            read |= _tables(variable["query"])
    assert read and read <= set(ROW_POLICIES), read - set(ROW_POLICIES)


def test_row_policies_keep_a_team_to_its_projects(store: Store, tmp_path: Path) -> None:
    """The policies' conditions, run as filters on the real schema, pass a team's rows and
    the shared cluster context, and nothing of another team's."""
    from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
    from jobtrail.runtime.sink import Sink

    runner = EmbeddedRunner(Sink(store, pipeline()), EmbeddedLog(tmp_path / "log"))
    runner.submit([started("a", 1, at(0), ["node-001"]),
                   started("b", 1, at(0), ["node-003"], project="other"),
                   ev("node.xid", at(5), scope="gpu", entity="node-001/gpu0", node="node-001",
                      attributes={"xid": 79}),
                   ev("node.xid", at(5), scope="gpu", entity="node-003/gpu0", node="node-003",
                      attributes={"xid": 79}),
                   ev("job.worker_exited", at(5, 2), job="a", attempt=1, node="node-001",
                      attributes={"rank": 0, "exit_code": 1}),
                   ev("job.worker_exited", at(5, 2), job="b", attempt=1, project="other",
                      node="node-003", attributes={"rank": 0, "exit_code": 1})])
    runner.drain()
    from processors.incidents.model import Actor, Command

    for n, row in enumerate(store.incidents(None)):
        runner.sink.command(Command(command_id=f"a{n}", incident_id=row["incident_id"],
                                    command="add_action", actor=Actor(kind="person", name="x"),
                                    time=at(9), data={"title": "swap the GPU"}))
    g = grant("ml", ["llm-pretrain"], store.database)
    p = "'llm-pretrain'"
    for table, condition in ROW_POLICIES.items():
        allowed = store.client.query(f"SELECT count() FROM {table} FINAL WHERE "
                                     f"{condition.format(p=p, db=store.database)}")
        everything = store.client.query(f"SELECT count() FROM {table} FINAL")
        kept, total = allowed.result_rows[0][0], everything.result_rows[0][0]
        assert 0 < kept < total, f"{table}: kept {kept} of {total}"
    theirs = store.client.query(
        f"SELECT count() FROM incidents FINAL WHERE "
        f"({ROW_POLICIES['incidents'].format(p=p, db=store.database)}) "
        "AND has(projects, 'other')").result_rows[0][0]
    assert theirs == 0
    statements = g.statements("'<pw>'")
    assert sum(s.startswith("CREATE ROW POLICY") for s in statements) == len(ROW_POLICIES)
    assert all("TO grafana_ml" in s for s in statements if s.startswith(("GRANT", "CREATE ROW")))


def test_grant_dry_run_and_embedded_mode(tmp_path: Path) -> None:
    runner = CliRunner()
    dry = runner.invoke(main, ["--home", str(tmp_path), "access", "grant", "ml", "--projects",
                               "llm-pretrain", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "CREATE ROW POLICY OR REPLACE grafana_ml_incidents" in dry.output
    assert "'<$JOBTRAIL_GRANT_PASSWORD>'" in dry.output  # the password is never printed
    assert '"uid": "jobtrail-clickhouse-ml"' in dry.output
    real = runner.invoke(main, ["--home", str(tmp_path), "access", "grant", "ml", "--projects",
                                "llm-pretrain"], env={"JOBTRAIL_CLICKHOUSE": ""})
    assert real.exit_code != 0 and "needs a ClickHouse server" in real.output
    bad = runner.invoke(main, ["--home", str(tmp_path), "access", "grant", "ML team",
                               "--projects", "x", "--dry-run"])
    assert bad.exit_code != 0 and "lower-case letters" in bad.output
