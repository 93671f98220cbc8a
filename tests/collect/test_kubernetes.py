"""`jobtrail collect kubernetes` (the official client) against a local API server that replays
recorded list and watch responses: a bookmark, a disconnect, a torn stream, `410 Gone` and a
relist, a 500, and a restart of the collector. It asserts what the collector requested and
what it stored: every object once, nothing lost across the gap the relist covers.

The objects are the public FailedScheduling Event of tests/ingest/fixtures/kubernetes/
public_get_yaml.yaml (from sapcc/helm-charts pull request #548, see its SOURCES.md), given
other uids, counts and resourceVersions; the Status of the 410 is the API server's wording.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.trust_kit import cli, free_port, stats

pytest.importorskip("kubernetes")
FIXTURE = (Path(__file__).resolve().parents[1] / "ingest" / "fixtures" / "kubernetes"
           / "public_get_yaml.yaml")
GONE = {"type": "ERROR", "object": {
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": "too old resource version: 105 (150)", "reason": "Expired", "code": 410}}


def _event(uid: str, count: int, version: int) -> dict[str, Any]:
    event = copy.deepcopy(next(yaml.safe_load_all(FIXTURE.read_text()))["items"][0])
    event["metadata"].update(uid=uid, resourceVersion=str(version),
                             name=f"resource-test-bdfcd9f5-g8jq5.{uid}")
    event["count"] = count
    return event


A, B, C, D, E = (_event("a", 12, 10), _event("b", 1, 11), _event("c", 1, 101),
                 _event("d", 1, 150), _event("e", 1, 202))
C2 = {**_event("c", 2, 201)}


def _line(kind: str, obj: dict[str, Any]) -> str:
    return json.dumps({"type": kind, "object": obj})


class ApiServer:
    """Answers /api/v1/events lists and watches from scripts, in order; records requests."""

    def __init__(self, lists: list[dict[str, Any]], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.requests: list[tuple[str, str]] = []
        self.port = free_port()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlparse(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                if url.path != "/api/v1/events":
                    self.send_error(404)
                    return
                watching = query.get("watch") == "true"
                server.requests.append(("watch" if watching else "list",
                                        query.get("resourceVersion", "")))
                if not watching:
                    body = json.dumps(server.lists.pop(0)).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                script = server.watches.pop(0) if server.watches else None
                if script == 500:
                    self.send_error(500, "etcdserver: request timed out")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                if script is None:  # nothing new: hold the watch until its timeout
                    time.sleep(min(float(query.get("timeoutSeconds", "1")), 1.0))
                    return
                for line in script:
                    self.wfile.write(line.encode() + (b"" if line.endswith("ADD") else b"\n"))
                    self.wfile.flush()

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def api() -> Iterator[ApiServer]:
    server = ApiServer(
        lists=[
            {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": "100"},
             "items": [A, B]},
            # the relist after 410: what was seen again, and D, missed in the gap
            {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": "200"},
             "items": [A, B, C, D]},
        ],
        watches=[
            [_line("ADDED", C), json.dumps({"type": "BOOKMARK", "object": {
                "kind": "Event", "apiVersion": "v1", "metadata": {"resourceVersion": "105"}}})],
            [json.dumps(GONE)],
            [_line("MODIFIED", C2)],
            ['{"type": "ADD'],   # a stream torn mid-line
            500,                 # the API server failing
        ])
    server.thread.start()
    yield server
    server.http.shutdown()
    server.http.server_close()


def _collect(home: Path, url: str) -> None:
    cli(home, "collect", "kubernetes", "--server", url, "--resources", "events",
        "--cluster", "cluster-a", "--watch-timeout", "1", "--until-idle", "4", timeout=120)


def test_list_watch_bookmark_410_relist_and_restart(api: ApiServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    _collect(home, api.url)
    first = list(api.requests)
    assert first[:5] == [("list", ""), ("watch", "100"), ("watch", "105"), ("list", ""),
                         ("watch", "200")]
    # after the torn stream and the 500 it resumes from the last version it stored
    assert set(first[5:]) == {("watch", "201")}
    assert json.loads((home / "collect" / "kubernetes.json").read_text()) == {"events": "201"}

    # a restart resumes from the saved cursor: no relist
    api.watches = [[_line("ADDED", E)]]
    api.requests.clear()
    _collect(home, api.url)
    assert api.requests[0] == ("watch", "201")
    assert ("list", "") not in api.requests

    counts = stats(home)
    assert counts["duplicate_event_ids"] == 0
    # A, B, C (count 1), D, C (count 2), E: the relisted A, B, C are not stored again
    assert counts["final"]["events"] == 6
