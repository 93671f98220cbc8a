"""Issue 11, black box: each defect found by a careful user or an attacker, reproduced through
the CLI and `jobtrail serve` as real processes (tests/trust_kit.py). Every test here failed
on the code before the fix (run with JOBTRAIL_TEST_ROOT pointing at that checkout).
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from jobtrail.learn import sample
from tests.trust_kit import (
    JOBTRAIL,
    ROOT,
    _env,
    cli,
    http,
    incident_logs,
    ingest,
    jsonl,
    serve,
    stats,
)

TOPOLOGY = str(ROOT / "examples" / "topology-64.yaml")


def _job(type_: str, t: str, job: str, project: str = "llm-pretrain", **extra: Any,
         ) -> dict[str, Any]:
    return {"type": type_, "time": f"2026-11-30T{t}Z", "cluster": "cluster-a",
            "project": project, "job_id": job, "attempt": 1, **extra}


# --- 1. the service can become impossible to start ---------------------------------------


def test_events_behind_the_watermark_never_wedge_a_restart(tmp_path: Path) -> None:
    note = [{"type": "operator.note", "time": "2026-11-30T08:30:00Z", "cluster": "cluster-a",
             "message": "maintenance window starts"}]
    late = [_job("job.started", "08:00:00", "j1", attributes={"nodes": ["node-001"],
                                                             "gpus": 8}),
            _job("job.step", "08:00:10", "j1", attributes={"step": 10})]
    later = [_job("job.step", "08:40:00", "j1", attributes={"step": 20})]
    home = tmp_path / "home"
    for records in (note, late):
        ingest(home, records, tmp_path)
    for _ in range(2):
        cli(home, "drain")
    ingest(home, later, tmp_path)
    assert stats(home)["final"]["events"] == 4
    # and it decided exactly what one uninterrupted run decides
    once = tmp_path / "once"
    ingest(once, note + late + later, tmp_path)
    assert incident_logs(home) == incident_logs(once)


# --- 2. a restart changes the incident log ------------------------------------------------


def _failures_then_silence() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Five attempts fail at 09:05 and are never restarted; the restart deadline (30 min)
    passes only in the second half, after a restart."""
    first: list[dict[str, Any]] = []
    for n in range(5):
        job = f"job-{n}"
        nodes = [f"node-{2 * n + 1:03d}", f"node-{2 * n + 2:03d}"]
        first += [_job("job.started", "09:00:00", job, attributes={"nodes": nodes, "gpus": 16}),
                  _job("job.step", "09:01:00", job, attributes={"step": 100}),
                  _job("comm.nccl_timeout", "09:05:00", job, node=nodes[0], severity="error",
                       attributes={"rank": 0}),
                  _job("job.failed", "09:05:30", job, attributes={"exit_code": 1})]
    # another job's steady progress moves event time on (10 min apart: no hang of its own)
    second = [_job("job.step", f"{h}:00", "job-other", attributes={"step": s})
              for s, h in enumerate(["09:20", "09:30", "09:40", "09:50", "10:00", "10:10"],
                                    start=1)]
    return first, second


def test_splitting_the_input_across_restarts_gives_the_same_incident_log(tmp_path: Path,
                                                                         ) -> None:
    first, second = _failures_then_silence()
    split, once = tmp_path / "split", tmp_path / "once"
    ingest(split, first, tmp_path)
    ingest(split, second, tmp_path)
    ingest(once, first + second, tmp_path)
    logs = incident_logs(once)
    assert sum(1 for log in logs.values() for _, kind, data in log
               if kind == "signal_added" and data.get("flag") == "no_restart") == 5
    assert incident_logs(split) == logs


def _committed(home: Path) -> int:
    for name in ("committed.seq", "committed"):
        path = home / "log" / name
        if path.exists():
            text = path.read_text().split()
            return int(text[0]) if text else 0
    return 0


def test_sigkill_mid_ingest_then_drain_gives_the_uninterrupted_incident_log(tmp_path: Path,
                                                                           ) -> None:
    # 10 jobs, one second apart each: NCCL timeouts open incidents, their restart
    # deadlines pass at ~18k events, and the kill lands somewhere in between
    records = sample.synthetic(40_000, jobs=10)
    data = tmp_path / "load.jsonl"
    data.write_bytes(jsonl(records))
    env = {"JOBTRAIL_BATCH_SIZE": "500", "JOBTRAIL_SNAPSHOT_INTERVAL_S": "1"}
    killed = tmp_path / "killed"
    proc = subprocess.Popen([*JOBTRAIL, "--home", str(killed), "ingest", str(data)], cwd=ROOT,
                            env=_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if 8_000 < _committed(killed) < 30_000:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "ingest finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    cli(killed, "drain", env=env)
    once = tmp_path / "once"
    cli(once, "ingest", str(data), env=env)
    assert stats(killed)["final"] == stats(once)["final"]
    logs = incident_logs(once)
    assert any(kind == "signal_added" and data.get("flag") == "no_restart"
               for log in logs.values() for _, kind, data in log)
    assert incident_logs(killed) == logs


def test_sigkill_of_serve_mid_stream_gives_the_uninterrupted_incident_log(tmp_path: Path,
                                                                          ) -> None:
    records = sample.synthetic(30_000, jobs=10)
    chunks = [records[i:i + 2_500] for i in range(0, len(records), 2_500)]
    env = {"JOBTRAIL_BATCH_SIZE": "500", "JOBTRAIL_SNAPSHOT_INTERVAL_S": "1"}
    home = tmp_path / "served"
    with serve(home, env) as server:
        for chunk in chunks[:6]:
            assert http("POST", f"{server.url}/v1/events", jsonl(chunk)).status == 202
        deadline = time.monotonic() + 120
        while _committed(home) < 2_000 and time.monotonic() < deadline:
            time.sleep(0.02)
        server.kill()  # SIGKILL: whatever was accepted is in the log
    with serve(home, env) as server:
        for chunk in chunks[6:]:
            assert http("POST", f"{server.url}/v1/events", jsonl(chunk)).status == 202
    once = tmp_path / "once"
    ingest(once, records, tmp_path, env=env)
    assert stats(home)["final"] == stats(once)["final"]
    assert incident_logs(home) == incident_logs(once)


# --- 3. a torn log tail eats the next acknowledged record ---------------------------------


def test_a_torn_log_tail_never_eats_the_next_record(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "log").mkdir(parents=True)
    # what a SIGKILL in the middle of appending a large record leaves behind
    (home / "log" / "log.jsonl").write_bytes(b'E{"type": "job.step", "time": "2026-11-30T0')
    records = [_job("job.step", f"09:00:{s:02d}", "j1", attributes={"step": s})
               for s in range(10)]
    out = ingest(home, records, tmp_path)
    assert "stored 10" in out.stdout and "dead-lettered 0" in out.stdout
    assert stats(home)["final"]["events"] == 10


# --- 4 and 5. projects: writes bound like reads, shared incidents narrowed ----------------

TOKENS = "tok-vision=vision;tok-llm=llm-pretrain;tok-ops=*"


def test_a_token_cannot_write_into_another_project(tmp_path: Path) -> None:
    env = {"JOBTRAIL_API_TOKENS": TOKENS}
    foreign = jsonl([_job("job.started", "09:00:00", "j-b", attributes={"nodes": ["node-009"]})])
    with serve(tmp_path / "home", env) as server:
        refused = http("POST", f"{server.url}/v1/events", foreign, token="tok-vision")
        assert refused.status == 403 and "llm-pretrain" in refused.body["error"]
        adapter = urllib_post(f"{server.url}/v1/ingest/training-log", b"step 10 loss 2.1\n",
                              token="tok-vision",
                              headers={"X-Jobtrail-Project": "llm-pretrain",
                                       "X-Jobtrail-Job": "j-b"})
        assert adapter.status == 403 and "llm-pretrain" in adapter.body["error"]
        # nor through infrastructure: a forged switch event would reach every tenant
        forged = jsonl([{"type": "network.port_down", "time": "2026-11-30T09:01:00Z",
                         "cluster": "cluster-a", "scope": "switch", "entity": "leaf-02"}])
        assert http("POST", f"{server.url}/v1/events", forged,
                    token="tok-vision").status == 403
        assert http("POST", f"{server.url}/v1/events", foreign, token="tok-llm").status == 202
        timeline = http("GET", f"{server.url}/v1/jobs/j-b/timeline?project=llm-pretrain",
                        token="tok-llm")
        assert len(timeline.body["rows"]) == 1


def urllib_post(url: str, body: bytes, token: str, headers: dict[str, str]) -> Any:
    import urllib.error
    import urllib.request

    from tests.trust_kit import Reply

    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Authorization": f"Bearer {token}", **headers})
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return Reply(resp.status, json.loads(resp.read()))
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, json.loads(exc.read()))


def _two_tenants_one_switch() -> list[dict[str, Any]]:
    """vision/job-v on node-001..002 and llm-pretrain/job-l on node-003..004, all under
    leaf-01; the leaf goes down and both jobs' NCCL watchdogs fire."""
    out: list[dict[str, Any]] = []
    for project, job, nodes in (("vision", "job-v", ["node-001", "node-002"]),
                                ("llm-pretrain", "job-l", ["node-003", "node-004"])):
        out.append(_job("job.started", "09:00:00", job, project,
                        attributes={"nodes": nodes, "gpus": 16}))
        out.append(_job("job.step", "09:01:00", job, project, attributes={"step": 50}))
    out.append({"type": "network.port_down", "time": "2026-11-30T09:05:00Z",
                "cluster": "cluster-a", "scope": "switch", "entity": "leaf-01",
                "message": "leaf-01 reboot"})
    for project, job, node in (("vision", "job-v", "node-001"),
                               ("llm-pretrain", "job-l", "node-003")):
        out.append(_job("comm.nccl_timeout", "09:05:30", job, project, node=node,
                        severity="error", attributes={"rank": 0}))
    return out


def test_a_shared_incident_shows_each_project_only_its_own(tmp_path: Path) -> None:
    env = {"JOBTRAIL_API_TOKENS": TOKENS, "JOBTRAIL_TOPOLOGY": TOPOLOGY}
    with serve(tmp_path / "home", env) as server:
        assert http("POST", f"{server.url}/v1/events", jsonl(_two_tenants_one_switch()),
                    token="tok-ops").status == 202
        deadline = time.monotonic() + 60
        while not http("GET", f"{server.url}/v1/incidents", token="tok-ops").body["incidents"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        (full,) = http("GET", f"{server.url}/v1/incidents", token="tok-ops").body["incidents"]
        assert full["impacted_jobs"] == 2
        url = f"{server.url}/v1/incidents/{full['incident_id']}"
        note = {"command": "note", "command_id": "n1",
                "data": {"text": "vision sees loss spikes at 09:04"}}
        assert http("POST", f"{url}/commands", note, token="tok-vision").status == 200
        action = {"command": "add_action", "command_id": "a1",
                  "data": {"title": "vision: re-run eval", "owner": "vera"}}
        assert http("POST", f"{url}/commands", action, token="tok-vision").status == 200
        listed = http("GET", f"{server.url}/v1/incidents", token="tok-llm").body["incidents"]
        shown = http("GET", url, token="tok-llm").body
        for seen in (listed, shown):
            text = json.dumps(seen)
            assert "job-v" not in text and "vision" not in text, text
        (mine,) = listed
        assert (mine["impacted_jobs"], mine["impacted_gpus"], mine["other_projects"]) == (1, 16, 1)
        assert [j["job_id"] for j in shown["jobs"]] == ["job-l"]
        # the processors' proposals are for everyone who sees it; vision's own action is not
        assert {a["status"] for a in shown["actions"]} == {"proposed"}
        vision = http("GET", url, token="tok-vision").body
        assert [a["title"] for a in vision["actions"] if a["status"] != "proposed"] == [
            "vision: re-run eval"]
        assert any(e["kind"] == "note_added" for e in vision["log"])
        # lifecycle commands on a shared incident are not one tenant's to take
        resolve = {"command": "resolve", "command_id": "r1"}
        refused = http("POST", f"{url}/commands", resolve, token="tok-vision")
        assert refused.status == 403 and "other project" in refused.body["error"]
        assert http("POST", f"{url}/commands", resolve, token="tok-ops").status == 200


# --- 7, 8, 9. hostile records: one record's fault is that record's -----------------------


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        value = {"x": value}
    return value


def test_deep_nesting_is_a_dead_letter_per_record(tmp_path: Path) -> None:
    good = [_job("job.step", f"09:00:0{s}", "j1", attributes={"step": s}) for s in (1, 2)]
    deep = _job("job.step", "09:00:05", "j1", attributes={"step": 5, "extra": _deep(600)})
    home = tmp_path / "home"
    body = jsonl([good[0]]) + json.dumps(deep).encode() + b"\n" + jsonl([good[1]])
    out = ingest(home, body, tmp_path)
    assert "stored 2" in out.stdout and "dead-lettered 1" in out.stdout
    assert "nested" in out.stderr
    alert = ('{"alerts": [' + '{"x": ' * 100_000 + "1" + "}" * 100_000 + "]}").encode()
    with serve(home) as server:
        deep_http = http("POST", f"{server.url}/v1/events", json.dumps(deep).encode())
        assert deep_http.status == 422 and "nested" in deep_http.body["rejected"][0]["reason"]
        am = http("POST", f"{server.url}/v1/ingest/alertmanager", alert)
        assert am.status in (202, 422) and am.body["dead_lettered"] == 1


def test_a_conflicting_resend_is_dead_lettered_and_the_first_wins(tmp_path: Path) -> None:
    first = _job("job.step", "09:00:00", "j1", id="evt-1", attributes={"step": 1})
    home = tmp_path / "home"
    ingest(home, [first], tmp_path)
    ingest(home, [first], tmp_path)  # a plain re-send is a duplicate
    moved = ingest(home, [{**first, "time": "2026-11-30T10:00:00Z"}], tmp_path)
    other = ingest(home, [{**first, "cluster": "cluster-b"}], tmp_path)
    for out, field in ((moved, "time"), (other, "cluster")):
        assert "dead-lettered 1" in out.stdout
        assert "conflicting re-send" in out.stderr and field in out.stderr
    s = stats(home)
    assert s["raw"]["events"] == s["final"]["events"] == 1
    rows = http_free_timeline(home, "j1")
    assert [r["time"][:19] for r in rows] == ["2026-11-30 09:00:00"]


def http_free_timeline(home: Path, job: str) -> list[dict[str, Any]]:
    out = cli(home, "timeline", job, "--project", "llm-pretrain", "--json").stdout
    return [json.loads(line) for line in out.splitlines()]


def test_one_bad_byte_costs_one_record_on_every_path(tmp_path: Path) -> None:
    lines = [json.dumps(_job("job.step", f"09:00:0{s}", "j1", attributes={"step": s})).encode()
             for s in range(4)]
    nul = lines[1][:-1] + b', "message": "a\x00b"}'
    bad_utf8 = lines[2][:-1] + b', "message": "caf\xe9"}'
    body = b"\n".join([lines[0], nul, bad_utf8, lines[3]]) + b"\n"
    home = tmp_path / "home"
    out = ingest(home, body, tmp_path)
    assert "stored 2" in out.stdout and "dead-lettered 2" in out.stdout
    with serve(tmp_path / "served") as server:
        reply = http("POST", f"{server.url}/v1/events", body)
        assert reply.status == 202
        assert (reply.body["accepted"], reply.body["dead_lettered"]) == (2, 2)
        reasons = " ".join(r["reason"] for r in reply.body["rejected"])
        assert "NUL" in reasons and "UTF-8" in reasons
        for bad in ('{"step": NaN}', '{"step": 1, "loss": Infinity}'):
            text = json.dumps(_job("job.step", "09:01:00", "j2"))[:-1] + \
                f', "attributes": {bad}}}'
            nan = http("POST", f"{server.url}/v1/events", text.encode())
            assert nan.status == 422, nan.body
        for attempt in ("2", True):
            record = _job("job.step", "09:02:00", "j3", attributes={"step": 1})
            record["attempt"] = attempt
            strict = http("POST", f"{server.url}/v1/events", json.dumps(record).encode())
            assert strict.status == 422 and strict.body["rejected"][0]["field"] == "attempt"


# --- 10. probes, responsiveness, a home in use ---------------------------------------------


def test_readiness_says_what_it_checked_and_liveness_stays_responsive(tmp_path: Path) -> None:
    home = tmp_path / "home"
    big = jsonl(sample.synthetic(70_000, jobs=20))  # ~15 MB, under the 16 MB body limit
    with serve(home) as server:
        ready = http("GET", f"{server.url}/readyz")
        assert ready.status == 200 and ready.body["checks"]["store"] == "ok"
        assert http("GET", f"{server.url}/livez").status == 200
        done: dict[str, Any] = {}
        poster = threading.Thread(target=lambda: done.update(
            r=http("POST", f"{server.url}/v1/events", big, timeout=300)))
        poster.start()
        worst = 0.0
        began = time.monotonic()
        while poster.is_alive():
            started = time.monotonic()
            assert http("GET", f"{server.url}/livez", timeout=30).status == 200
            worst = max(worst, time.monotonic() - started)
            time.sleep(0.05)
        poster.join()
        total = time.monotonic() - began
        assert done["r"].status == 202
        # parsing 70k events takes seconds; the loop answers while it happens: a loop the
        # parse blocked would answer once, after about all of it (relative, so a loaded
        # machine that slows both does not fail it)
        assert worst < max(2.0, total / 4), \
            f"/livez took {worst:.1f} s while a big batch was parsed for {total:.1f} s"
        # the CLI on a home that serve holds says so, and who
        busy = cli(home, "stats", check=False)
        assert busy.returncode != 0
        assert f"in use by pid {server.proc.pid}" in busy.stderr, busy.stderr


def test_a_server_whose_broker_is_down_starts_says_so_and_accepts_nothing(tmp_path: Path,
                                                                        ) -> None:
    from tests.trust_kit import free_port

    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    with serve(tmp_path / "home", {"JOBTRAIL_KAFKA": dead}, ready=False) as server:
        assert http("GET", f"{server.url}/livez").status == 200
        ready = http("GET", f"{server.url}/readyz", timeout=120)
        assert ready.status == 503 and ready.body["checks"]["broker"].startswith("unavailable")
        refused = http("POST", f"{server.url}/v1/events",
                       jsonl([_job("job.step", "09:00:00", "j1", attributes={"step": 1})]))
        assert refused.status == 503 and "retry" in refused.body["error"]
