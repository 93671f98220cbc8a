"""Black-box helpers: the CLI and `jobtrail serve` as real subprocesses, HTTP over loopback.

The trust tests (tests/test_trust.py) use only these, so they exercise what a user runs.
`JOBTRAIL_TEST_ROOT` points them at another checkout (how the closing note showed that each
of them fails on the code before the fix).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(os.environ.get("JOBTRAIL_TEST_ROOT") or Path(__file__).resolve().parent.parent)
JOBTRAIL = [sys.executable, "-m", "jobtrail.cli"]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTRAIL_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra or {})
    return env


def cli(home: Path, *args: str, stdin: bytes | None = None, check: bool = True,
        env: dict[str, str] | None = None, timeout: float = 300,
        ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*JOBTRAIL, "--home", str(home), *args], input=stdin,
                          capture_output=True, timeout=timeout, cwd=ROOT, env=_env(env))
    out = subprocess.CompletedProcess(proc.args, proc.returncode,
                                      proc.stdout.decode("utf-8", "replace"),
                                      proc.stderr.decode("utf-8", "replace"))
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {out.returncode}:\n{out.stderr[-3000:]}")
    return out


def jsonl(records: list[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(r) for r in records) + "\n").encode()


def ingest(home: Path, records: list[dict[str, Any]] | bytes, tmp: Path, *extra: str,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    data = records if isinstance(records, bytes) else jsonl(records)
    path = tmp / f"in-{time.monotonic_ns()}.jsonl"
    path.write_bytes(data)
    return cli(home, "ingest", str(path), *extra, env=env)


def stats(home: Path) -> dict[str, Any]:
    return json.loads(cli(home, "stats").stdout)  # type: ignore[no-any-return]


def incident_logs(home: Path) -> dict[str, list[tuple[int, str, Any]]]:
    """Every incident's log as (seq, kind, data), by incident id (operator view)."""
    listed = cli(home, "incidents", "--all", "--json").stdout.splitlines()
    out = {}
    for line in listed:
        incident_id = json.loads(line)["incident_id"]
        shown = json.loads(cli(home, "incident", "show", incident_id, "--json").stdout)
        out[incident_id] = [(e["seq"], e["kind"], e["data"]) for e in shown["log"]]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Reply:
    status: int
    body: Any


def http(method: str, url: str, body: bytes | dict[str, Any] | None = None,
         token: str = "", timeout: float = 120) -> Reply:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return Reply(status, json.loads(raw))
    except ValueError:
        return Reply(status, raw.decode("utf-8", "replace"))


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)


@contextmanager
def serve(home: Path, env: dict[str, str] | None = None, timeout_s: float = 120,
          ready: bool = True) -> Iterator[Server]:
    """`jobtrail serve` on a free loopback port, up when `/healthz` answers 200 (or, with
    `ready=False`, when `/livez` does)."""
    port = free_port()
    log = home.parent / f"serve-{port}.log"
    home.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen([*JOBTRAIL, "--home", str(home), "serve", "--port", str(port)],
                                cwd=ROOT, env=_env(env), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    server = Server(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited {proc.returncode}: "
                                     f"{log.read_text()[-3000:]}")
            try:
                probe = "/healthz" if ready else "/livez"
                if http("GET", f"{server.url}{probe}", timeout=5).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"serve not ready: {log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
