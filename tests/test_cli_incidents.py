"""What an on-call engineer runs on the serving host: `incident show` says what to do now
(the next step and its command, the top follow-up and its command, the runbook, what is
still drained, the links to the dashboards and the API); `incidents` never prints 0.00 GPU-h
for a loss not assessed yet; `entity` is a table (JSON with --json); the job timeline names
the incident each row is evidence of; confidences read back as decided (0.85, not
0.8500000238418579). The commands a message prints (`jobtrail incident ack ...`) work while
`jobtrail serve` holds the home: the CLI sends them through its API as the operator."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import yaml

from jobtrail.learn import sample, scenarios
from tests.trust_kit import ROOT, cli, http, serve

TOPOLOGY = str(ROOT / "examples" / "topology-64.yaml")
ENV = {"JOBTRAIL_TOPOLOGY": TOPOLOGY, "JOBTRAIL_GRAFANA_URL": "https://grafana.example",
       "JOBTRAIL_PUBLIC_URL": "https://jt.example"}


def _demo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A home holding the bundled sample (a 512-GPU job's link errors, an Xid that drains
    node-041, a node gone not ready): the incidents by class."""
    home = tmp_path / "home"
    events = tmp_path / "sample.jsonl"
    events.write_text(sample.jsonl())
    cli(home, "ingest", str(events), env=ENV)
    rows = [json.loads(line) for line in cli(home, "incidents", "--all", "--json",
                                             env=ENV).stdout.splitlines()]
    return home, {r["class"]: r["incident_id"] for r in rows}


def test_incident_show_says_what_to_do_now(tmp_path: Path) -> None:
    home, ids = _demo(tmp_path)
    inc = ids["network"]
    shown = cli(home, "incident", "show", inc, env=ENV).stdout
    now = shown.split("  what to do now:\n")[1].split("\n\n")[0].splitlines()
    assert now[0] == f"    1. acknowledge it (you are on it): jobtrail incident ack {inc}"
    full = json.loads(cli(home, "incident", "show", inc, "--json", env=ENV).stdout)
    top = sorted((a for a in full["actions"] if a["status"] == "proposed"),
                 key=lambda a: a["action_id"])[0]
    assert now[1].startswith(f"    2. proposed: {top['title']} (")
    assert f": jobtrail incident action-accept {inc} {top['action_id']}" in now[1]
    assert now[2] == (f"    3. runbook: none for network yet (the postmortem writes one: "
                      f"jobtrail postmortem runbook {inc})")
    # node-041 was drained by the Xid (the sample's node.drained) and never resumed
    assert now[3].startswith("    4. still drained: node-041 since 2026-11-30 08:58 "
                             "(node-041 drained: Xid 79)")
    assert now[4] == ("    dashboard: https://grafana.example/d/jobtrail-incident?"
                      f"var-incident={inc}")
    assert now[5].startswith("    job timeline (job-7b-001 attempt 1): https://grafana.example"
                             "/d/jobtrail-job?var-project=llm-pretrain&var-job=job-7b-001"
                             "&var-attempt=1&from=")
    assert now[6] == f"    API: https://jt.example/v1/incidents/{inc}"
    # a runbook the postmortem wrote is named once it exists
    book = home / "learnings" / "runbooks" / "network.md"
    book.parent.mkdir(parents=True)
    book.write_text("# Runbook: network\n\n## a (inc-1, 2026-11-01)\n\n## b (inc-2, x)\n")
    again = cli(home, "incident", "show", inc, env=ENV).stdout
    assert f"    3. runbook: {book} (2 incident(s) of class network)" in again
    # the confidence reads back as decided, in the JSON and the list
    assert full["confidence"] == 0.85
    listed = json.loads(cli(home, "incidents", "--json", env=ENV).stdout.splitlines()[0])
    assert listed["confidence"] == 0.85


def test_the_loss_not_assessed_yet_is_not_zero(tmp_path: Path) -> None:
    """ib-flap-64 up to before the restart: the 512-GPU job failed, nothing is assessed."""
    story = scenarios.load_document(yaml.safe_load(
        (scenarios.LIBRARY / "ib-flap-64.yaml").read_text()))
    (tmp_path / "topology.yaml").write_text(yaml.safe_dump(scenarios.topology(story)))
    events = tmp_path / "events.jsonl"
    events.write_text("".join(e.model_dump_json(exclude_none=True) + "\n"
                              for e in story.events if e.time.hour < 10 or e.time.minute < 15))
    env = {"JOBTRAIL_TOPOLOGY": str(tmp_path / "topology.yaml")}
    home = tmp_path / "home"
    cli(home, "ingest", str(events), env=env)
    listed = cli(home, "incidents", env=env).stdout.splitlines()
    row = next(line for line in listed if line.startswith("inc-"))
    assert " 512          —  awaiting_restart" in row, listed
    assert "0.00" not in row
    assert listed[-1].startswith("—: not assessed yet")
    inc = row.split()[0]
    shown = cli(home, "incident", "show", inc, env=env).stdout
    assert "impact: 1 jobs, 512 GPUs, not assessed yet and 0 steps lost" in shown


def test_entity_is_a_table_and_the_timeline_names_the_incident(tmp_path: Path) -> None:
    home, ids = _demo(tmp_path)
    table = cli(home, "entity", "node-041", "--project", "llm-pretrain", env=ENV).stdout
    lines = table.splitlines()
    assert lines[0] == "node-041: 6 events"
    assert lines[1].split() == ["time", "source", "type", "severity", "where", "message"]
    assert lines[-1].split() == ["2026-11-30", "08:58:10", "node", "node.drained", "warning",
                                 "node-041", "node-041", "drained:", "Xid", "79"]
    assert "{" not in table
    rows = [json.loads(x) for x in cli(home, "entity", "node-041", "--project", "llm-pretrain",
                                       "--json", env=ENV).stdout.splitlines()]
    assert [r["type"] for r in rows][-1] == "node.drained" and len(rows) == 6
    timeline = cli(home, "timeline", "job-7b-001", "--project", "llm-pretrain",
                   "--no-colour", env=ENV).stdout.splitlines()
    inc = ids["network"]
    assert timeline[1] == (f"incident {inc}: network on leaf-05/p9 in cluster-a (jobtrail "
                           f"incident show {inc})")
    errors = next(x for x in timeline if "network.link_errors" in x)
    assert errors.endswith(f"  [{inc}]")
    started = next(x for x in timeline if "job.started" in x)
    assert "[inc-" not in started  # a row that is nobody's evidence names no incident


def test_the_commands_a_message_prints_work_beside_serve(tmp_path: Path) -> None:
    home, ids = _demo(tmp_path)
    inc = ids["network"]
    ana = {**ENV, "JOBTRAIL_IDENTITY": "ic-ana"}
    with serve(home, {**ENV, "JOBTRAIL_API_TOKENS": "tok-ops=*"}) as server:
        served = json.loads((home / ".serve.json").read_text())
        assert served["pid"] == server.proc.pid and served["url"] == server.url
        assert oct((home / ".serve.json").stat().st_mode & 0o777) == "0o600"
        full = json.loads(cli(home, "incident", "show", inc, "--json", env=ana).stdout)
        top = sorted(a["action_id"] for a in full["actions"] if a["status"] == "proposed")[0]
        acked = cli(home, "incident", "ack", inc, env=ana)
        assert acked.returncode == 0 and "acknowledged by person:ic-ana" in acked.stdout
        accepted = cli(home, "incident", "action-accept", inc, top, env=ana)
        assert "action_updated by person:ic-ana" in accepted.stdout, accepted.stdout
        log = http("GET", f"{server.url}/v1/incidents/{inc}", token="tok-ops").body["log"]
        (entry,) = [e for e in log if e["kind"] == "acknowledged"]
        assert (entry["actor_kind"], entry["actor"], entry["credential"]) == (
            "person", "ic-ana", "cli:JOBTRAIL_IDENTITY")
        refused = cli(home, "incident", "ack", inc, env=ana, check=False)
        assert refused.returncode == 1 and "answered 409 by jobtrail serve" in refused.stderr
        shown = cli(home, "incident", "show", inc, env=ana).stdout
        assert "  sev1 acknowledged" in shown and "mitigate " in shown
        assert cli(home, "incidents", env=ana).stdout.count("acknowledged") == 1
        assert "node-041: 6 events" in cli(home, "entity", "node-041", "--project",
                                            "llm-pretrain", env=ana).stdout
        # the key is this run's, and only from this host
        forged = http("GET", f"{server.url}/v1/whoami")
        assert forged.status == 401
        import urllib.request

        request = urllib.request.Request(f"{server.url}/v1/whoami", headers={
            "X-Jobtrail-Home-Key": "0" * 64, "X-Jobtrail-Operator": "mallory",
            "X-Jobtrail-Operator-Credential": "cli:os-user"})
        try:
            urllib.request.urlopen(request, timeout=30)
            raise AssertionError("a wrong key was accepted")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        # a file a killed server left is never followed: another holder, the old message
        server.kill()
    (home / ".serve.json").write_text(json.dumps({**served, "pid": os.getpid()}))
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from jobtrail.runtime.home import "
        "HomeLock; HomeLock(Path(sys.argv[1])).acquire('test holder'); print('held', "
        "flush=True); time.sleep(300)"), str(home)], cwd=ROOT, stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        busy = cli(home, "incident", "ack", inc, env=ana, check=False)
        assert busy.returncode == 1 and "is in use by pid" in busy.stderr
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
