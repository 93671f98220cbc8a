"""The shipped rsyslog configuration (deploy/rsyslog/) run by the real `rsyslogd` against the
real broker: kernel-log and training-log lines become events with the line's time, node and
job; every line arrives exactly once across an rsyslogd restart and across a broker outage
(during which rsyslogd is restarted too: its disk-assisted queue holds the lines).

Needs Debian's `rsyslog` and `rsyslog-kafka` (scripts/test.sh installs them); skipped without
them outside CI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from jobtrail.config import Settings
from jobtrail.dev import kafka
from jobtrail.runtime.kafka_io import ensure_topics
from tests.integration.kafka_helpers import Worker, consume_all, produce_raw, run_to_end

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
RENDER = ROOT / "deploy" / "rsyslog" / "render.sh"
OMKAFKA = Path("/usr/lib/x86_64-linux-gnu/rsyslog/omkafka.so")
NODE = "node-041"


def _need_rsyslog() -> None:
    if shutil.which("rsyslogd") and OMKAFKA.exists():
        return
    if os.environ.get("CI"):
        pytest.fail("rsyslogd with omkafka must be installed in CI (scripts/test.sh)")
    pytest.skip("rsyslogd/omkafka not installed (apt-get install rsyslog rsyslog-kafka)")


class Rsyslog:
    """A dedicated rsyslogd on the rendered configuration, started and stopped by pid."""

    def __init__(self, conf: Path) -> None:
        self.conf = conf
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = conf.parent / "rsyslogd.out"

    def start(self) -> None:
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            ["rsyslogd", "-n", "-f", str(self.conf), "-i", str(self.conf.parent / "pid")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


def _lines(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    return [json.loads(v) for _, _, v in consume_all(bootstrap, [topic])[topic]]


def _wait_for(bootstrap: str, topic: str, count: int, daemon: Rsyslog,
              timeout_s: float = 90) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    got: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        assert daemon.proc is None or daemon.proc.poll() is None, daemon.log.read_text()[-3000:]
        got = _lines(bootstrap, topic)
        if len(got) >= count:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{len(got)} of {count} lines in {topic}: "
                         f"{daemon.log.read_text()[-3000:]}")


def _append(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write("".join(f"{line}\n" for line in lines))


def _xid(i: int) -> str:
    return (f"2026-12-06T01:00:{i:02d}.250000+00:00 {NODE} kernel: NVRM: Xid "
            f"(PCI:0000:3b:00): 79, pid={1000 + i}, name=python, GPU has fallen off the bus.")


def _train(i: int) -> str:
    return f"2026-12-06T01:01:{i:02d}.500Z step={100 + i} loss=2.5 step_time=1.2s"


_QUERY = """
import json, sys
import clickhouse_connect
client = clickhouse_connect.get_client(dsn=sys.argv[1])
rows = client.query("SELECT type, node, project, job_id, attempt, toString(time), cluster "
                    "FROM jobtrail.events FINAL ORDER BY time").result_rows
print(json.dumps(rows))
"""


def test_rsyslog_ships_lines_once_across_restart_and_outage(
        kafka_broker_process: list[kafka.Broker], tmp_path: Path) -> None:
    _need_rsyslog()
    import asyncio

    bootstrap = kafka_broker_process[0].bootstrap
    tag = uuid.uuid4().hex[:8]
    prefix, app_id = f"s{tag}.", f"rsyslog-{tag}"
    settings = Settings(kafka=bootstrap, topic_prefix=prefix)
    asyncio.run(ensure_topics(settings))
    raw = settings.topic("raw")
    kern, train = tmp_path / "kern.log", tmp_path / "train" / "llm" / "4242" / "1" / f"{NODE}.log"
    kern.touch()
    env = {**os.environ, "JOBTRAIL_KAFKA": bootstrap, "JOBTRAIL_RAW_TOPIC": raw,
           "JOBTRAIL_CLUSTER": "cluster-a", "JOBTRAIL_SPOOL": str(tmp_path / "spool"),
           "JOBTRAIL_KMSG": "0",  # imkmsg replays the host's ring buffer: not countable
           "JOBTRAIL_KERNEL_LOG": str(kern), "JOBTRAIL_TRAIN_ROOT": str(tmp_path / "train"),
           "JOBTRAIL_SLURM_LOGS": str(tmp_path / "slurm"), "JOBTRAIL_NODE": NODE}
    rendered = subprocess.run(["bash", str(RENDER), str(tmp_path / "conf")], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
    assert rendered.returncode == 0, rendered.stderr
    daemon = Rsyslog(Path(rendered.stdout.strip()))
    daemon.start()
    try:
        # 1. running: lines appended to the kernel log and a training log
        _append(kern, [_xid(i) for i in range(3)])
        _append(train, [_train(i) for i in range(3)])
        _wait_for(bootstrap, raw, 6, daemon)

        # 2. rsyslogd restarted: what it already shipped is not shipped again
        daemon.stop()
        _append(kern, [_xid(i) for i in range(3, 5)])
        _append(train, [_train(i) for i in range(3, 5)])
        daemon.start()
        _wait_for(bootstrap, raw, 10, daemon)
        time.sleep(2)
        assert len(_lines(bootstrap, raw)) == 10  # a clean restart re-sends nothing

        # 3. the broker down (jobtrail's side unreachable), rsyslogd restarted meanwhile
        kafka.stop(kafka_broker_process[0])
        _append(kern, [_xid(i) for i in range(5, 8)])
        _append(train, [_train(i) for i in range(5, 8)])
        time.sleep(3)  # imfile polls every second: let it read them while the broker is down
        daemon.stop()
        _append(kern, [_xid(8)])
        daemon.start()
        time.sleep(3)
        kafka_broker_process[0] = kafka.restart(kafka_broker_process[0])
        back = time.monotonic()
        shipped = _wait_for(bootstrap, raw, 17, daemon, timeout_s=120)
        print(f"after the outage: {len(shipped)} lines in Kafka "
              f"{time.monotonic() - back:.1f} s after the broker answered")
        time.sleep(2)  # nothing more (a duplicate) arrives late
        shipped = _lines(bootstrap, raw)
    finally:
        if daemon.proc is not None:
            daemon.stop()
        if not kafka.alive(kafka_broker_process[0]):  # the session's broker, for the next tests
            kafka_broker_process[0] = kafka.restart(kafka_broker_process[0])

    # on the wire: every line, and a line sent twice only as the same envelope byte for byte
    # (what librdkafka held at shutdown is both resubmitted and kept in failedMsgFile), which
    # has the same event id: jobtrail stores it once
    expected = [_xid(i) for i in range(9)] + [_train(i) for i in range(8)]
    assert sorted({m["msg"] for m in shipped}) == sorted(expected)
    envelopes = {m["msg"]: {json.dumps(x, sort_keys=True) for x in shipped if x["msg"] == m["msg"]}
                 for m in shipped}
    assert all(len(copies) == 1 for copies in envelopes.values())
    assert all(m["envelope"] == "jobtrail/1" and m["node"] == NODE for m in shipped)
    print(f"{len(shipped) - len(expected)} of {len(expected)} lines sent twice")

    # the raw route turns them into events with the line's time, node and job
    worker = Worker(bootstrap, tmp_path / "home", prefix, app_id)
    run_to_end(worker, bootstrap, app_id, [settings.topic(t) for t in ("raw", "events")])
    out = subprocess.run([sys.executable, "-c", _QUERY,
                          f"chdb://{(tmp_path / 'home' / 'chdb').resolve()}"],
                         capture_output=True, text=True, timeout=300, check=True)
    rows = json.loads(out.stdout)
    xids = [r for r in rows if r[0] == "node.xid"]
    steps = [r for r in rows if r[0] == "job.step"]
    assert len(xids) == 9 and len(steps) == 8, rows
    assert {(r[1], r[6]) for r in xids} == {(NODE, "cluster-a")}
    assert [r[5] for r in xids] == [f"2026-12-06 01:00:{i:02d}.250" for i in range(9)]
    assert {(r[2], r[3], r[4]) for r in steps} == {("llm", "4242", 1)}
    assert [r[5] for r in steps] == [f"2026-12-06 01:01:{i:02d}.500" for i in range(8)]


def _jobtrail(home: Path, *args: str, env: dict[str, str]) -> list[dict[str, Any]]:
    """A `jobtrail` read command's JSON lines."""
    done = subprocess.run([sys.executable, "-m", "jobtrail.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
                          check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_shipped_lines_reach_the_job_on_their_node(
        kafka_broker_process: list[kafka.Broker], tmp_path: Path) -> None:
    """docs/connect.md step 3 through the real rsyslogd: a kernel Xid naming its GPU by PCI
    address shows in `jobtrail entity node-041/gpu3` (the topology's GPU table), and a Lustre
    client error (ENOSPC on an OST) logged on the node a job runs on is on that job's
    timeline, reached through the node (the job mounts nothing the topology knows)."""
    _need_rsyslog()
    import asyncio

    from ingest.canonical import to_event

    bootstrap = kafka_broker_process[0].bootstrap
    tag = uuid.uuid4().hex[:8]
    prefix, app_id = f"n{tag}.", f"rsyslog-node-{tag}"
    settings = Settings(kafka=bootstrap, topic_prefix=prefix)
    asyncio.run(ensure_topics(settings))
    kern = tmp_path / "kern.log"
    kern.touch()
    env = {**os.environ, "JOBTRAIL_KAFKA": bootstrap, "JOBTRAIL_RAW_TOPIC": settings.topic("raw"),
           "JOBTRAIL_CLUSTER": "cluster-a", "JOBTRAIL_SPOOL": str(tmp_path / "spool"),
           "JOBTRAIL_KMSG": "0", "JOBTRAIL_KERNEL_LOG": str(kern),
           "JOBTRAIL_TRAIN_ROOT": str(tmp_path / "train"),
           "JOBTRAIL_SLURM_LOGS": str(tmp_path / "slurm"), "JOBTRAIL_NODE": NODE}
    rendered = subprocess.run(["bash", str(RENDER), str(tmp_path / "conf")], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
    assert rendered.returncode == 0, rendered.stderr
    topology = tmp_path / "topology.yaml"
    topology.write_text(
        "cluster: cluster-a\nvalid_from: '2026-01-01T00:00:00Z'\n"
        f"nodes:\n  {NODE}: {{gpus: 8, nics: {{mlx5_0: {{switch: leaf-05, port: p9}}}}}}\n"
        "switches:\n  leaf-05: {tier: leaf}\n"
        "gpu_pci:\n  '0000:9b:00.0': 3\n")
    # the scheduler's word: job 4242 of project llm runs on node-041 from 01:00:00
    start = to_event({"id": "slurm-cluster-a-4242-1-job.started", "type": "job.started",
                      "time": "2026-12-06T01:00:00Z", "cluster": "cluster-a",
                      "project": "llm", "job_id": "4242", "attempt": 1,
                      "attributes": {"nodes": [NODE], "gpus": 8}}, producer="slurm-collector",
                     observed_at=datetime(2026, 12, 6, 1, 0, tzinfo=UTC))
    produce_raw(bootstrap, settings.topic("events"), [start.to_json().encode()],
                key=b"cluster-a")
    xid = (f"2026-12-06T01:05:00.250000+00:00 {NODE} kernel: NVRM: Xid (PCI:0000:9b:00): 79, "
           "pid=4242, name=python, GPU has fallen off the bus.")
    lustre = (f"2026-12-06T01:04:00.500000+00:00 {NODE} kernel: LustreError: 11-0: "
              "scratch-OST0007-osc-ffff8f0c04a1e800: operation ost_write to node "
              "10.0.0.7@o2ib failed: rc = -28")
    daemon = Rsyslog(Path(rendered.stdout.strip()))
    daemon.start()
    try:
        _append(kern, [lustre, xid])
        shipped = _wait_for(bootstrap, settings.topic("raw"), 2, daemon)
    finally:
        daemon.stop()
    assert sorted(m["msg"] for m in shipped) == sorted([lustre, xid])
    assert {m["node"] for m in shipped} == {NODE}

    home = tmp_path / "home"
    worker = Worker(bootstrap, home, prefix, app_id)
    worker.env["JOBTRAIL_TOPOLOGY"] = str(topology)
    run_to_end(worker, bootstrap, app_id, [settings.topic(t) for t in ("raw", "events")])
    reader = {k: v for k, v in os.environ.items() if not k.startswith("JOBTRAIL_")}
    reader.update(PYTHONPATH=str(ROOT), JOBTRAIL_TOPOLOGY=str(topology))
    on_gpu = _jobtrail(home, "entity", f"{NODE}/gpu3", "--project", "llm", "--json",
                      env=reader)
    assert [(r["type"], r["entity"], r["node"], str(r["time"])[:23]) for r in on_gpu] == [
        ("node.xid", f"{NODE}/gpu3", NODE, "2026-12-06 01:05:00.250")]
    rows = _jobtrail(home, "timeline", "4242", "--project", "llm", "--json", env=reader)
    storage = [r for r in rows if r["type"] == "storage.io_error"]
    assert [(r["relation"], r["node"], r["attempt"]) for r in storage] == [("client", NODE, 1)]
    assert "ENOSPC" in json.dumps(storage[0]["attributes"])
    assert [(r["relation"], r["entity"]) for r in rows if r["type"] == "node.xid"] == [
        ("gpu", f"{NODE}/gpu3")]
