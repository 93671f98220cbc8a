"""One payload cannot stall the server (issue 25, finding 2): a source payload is parsed off
the event loop against a time budget (JOBTRAIL_PARSE_BUDGET_S); past it the request is
answered 413 naming the budget, and `/livez` answers while the parse is still running."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.trust_kit import http, serve


def _post(url: str, body: bytes, timeout: float = 300) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "X-Jobtrail-Project": "p", "X-Jobtrail-Job": "j-1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_payload_over_its_parse_budget_is_refused_and_livez_answers_meanwhile(
        tmp_path: Path) -> None:
    # ~1.6 MB of step lines: 100k events, seconds of parsing on any machine, so the
    # parse is still running when the 0.5 s budget answers and /livez is asked
    huge = b"step=1 loss=0.5\n" * 100_000
    with serve(tmp_path / "home", env={"JOBTRAIL_PARSE_BUDGET_S": "0.5"}) as server:
        started = time.monotonic()
        status, body = _post(f"{server.url}/v1/ingest/training-log", huge)
        assert status == 413, body
        assert "0.5 s parse budget (JOBTRAIL_PARSE_BUDGET_S)" in body
        assert "nothing of it was accepted" in body
        answered = time.monotonic()
        live = http("GET", f"{server.url}/livez", timeout=30)
        assert live.status == 200
        # generous bounds: the budget answered in seconds, /livez too, while the parse went on
        assert answered - started < 60
        assert time.monotonic() - answered < 10
        # a small payload after it is parsed once the thread is free, within its own budget
        status, body = _post(f"{server.url}/v1/ingest/training-log", b"step=2 loss=0.4\n")
        assert status == 202, body
