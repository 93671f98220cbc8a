"""The shipped Prometheus rules and Alertmanager receiver (deploy/prometheus/), validated by
promtool/amtool and run by the real daemons (Debian's prometheus 2.42, prometheus-alertmanager
0.25) against `jobtrail serve`: Prometheus scrapes a dcgm-exporter-shaped exporter this test
serves; a firing Xid alert becomes a signal on the right node and GPU and opens an incident,
a second GPU's alert on the same node joins it, a repeat of the group adds nothing and the
resolved alert ends the signal without a new one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.trust_kit import free_port, http, serve

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "prometheus"
NODE = "node-041"
TOOLS = ("prometheus", "prometheus-alertmanager", "promtool", "amtool")


def _need(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if not missing:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{', '.join(missing)} must be installed in CI (scripts/test.sh)")
    pytest.skip(f"not installed: {', '.join(missing)} (apt-get install prometheus "
                "prometheus-alertmanager)")


def test_rules_and_receiver_pass_the_official_checkers(tmp_path: Path) -> None:
    _need("promtool", "amtool")
    for args in (["promtool", "check", "rules", str(DEPLOY / "gpu-health.rules.yml")],
                 ["promtool", "check", "config", str(DEPLOY / "prometheus.yml")],
                 ["promtool", "test", "rules", str(DEPLOY / "gpu-health.tests.yml")],
                 ["amtool", "check-config", str(DEPLOY / "alertmanager.yml")]):
        out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False,
                             cwd=DEPLOY)
        assert out.returncode == 0, f"{args}: {out.stdout}{out.stderr}"
    receiver = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())["receivers"][0]
    hook = receiver["webhook_configs"][0]
    assert hook["send_resolved"] is True
    assert hook["url"].endswith("/v1/ingest/alertmanager")
    assert hook["http_config"]["authorization"]["type"] == "Bearer"


# --- a dcgm-exporter-shaped exporter --------------------------------------------------------

_LABELS = ('gpu="{gpu}",UUID="GPU-5a1c0000-0000-0000-0000-00000000000{gpu}",'
           'pci_bus_id="00000000:{bus}:00.0",device="nvidia{gpu}",'
           'modelName="NVIDIA H100 80GB HBM3",Hostname="{node}",'
           'DCGM_FI_DRIVER_VERSION="535.161.08"')


class Exporter:
    """Serves `DCGM_FI_DEV_XID_ERRORS` per GPU from `self.xid`, and node exporter's
    filesystem series per mount from `self.used_pct`, read on every scrape."""

    def __init__(self) -> None:
        self.xid: dict[int, int] = {0: 0, 3: 0, 5: 0}
        self.used_pct: dict[tuple[str, str], float] = {}
        """(mountpoint, fstype) -> percent used, as node exporter's avail/size give it"""
        self.port = free_port()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                lines = ["# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error "
                         "encountered.", "# TYPE DCGM_FI_DEV_XID_ERRORS gauge"]
                for gpu, value in sorted(exporter.xid.items()):
                    labels = _LABELS.format(gpu=gpu, bus=f"{0x1b + gpu:02X}", node=NODE)
                    lines.append(f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {value}")
                size = 1 << 40
                for (mount, fstype), used in sorted(exporter.used_pct.items()):
                    labels = f'device="dev{len(mount)}",fstype="{fstype}",mountpoint="{mount}"'
                    lines += [f"node_filesystem_size_bytes{{{labels}}} {size}",
                              f"node_filesystem_avail_bytes{{{labels}}} "
                              f"{int(size * (100 - used) / 100)}"]
                body = ("\n".join(lines) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Exporter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Daemon:
    def __init__(self, args: list[str], log: Path, ready_url: str) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=log.parent)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(ready_url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"not ready: {log.read_text()[-3000:]}"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _until(what: str, probe: Callable[[], Any], timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = probe()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _notifications(am: str) -> int:
    """Alertmanager's own count of webhook deliveries that succeeded."""
    with urllib.request.urlopen(f"{am}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    total = failed = 0.0
    for line in text.splitlines():
        if 'integration="webhook"' in line:
            if line.startswith("alertmanager_notifications_total"):
                total += float(line.rsplit(" ", 1)[1])
            elif line.startswith("alertmanager_notifications_failed_total"):
                failed += float(line.rsplit(" ", 1)[1])
    return int(total - failed)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """jobtrail serve + Alertmanager + Prometheus on the shipped files, test timings."""
    _need(*TOOLS)
    token = "am-token-for-tests"
    env = {"JOBTRAIL_API_TOKENS": f"{token}=@infra;ops-token=*"}
    with serve(tmp_path / "home", env) as server, Exporter() as exporter:
        (tmp_path / "jobtrail.token").write_text(token + "\n")
        am_port, prom_port = free_port(), free_port()
        am_conf = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
        am_conf["route"].update(group_wait="1s", group_interval="1s", repeat_interval="4s")
        hook = am_conf["receivers"][0]["webhook_configs"][0]
        hook["url"] = f"{server.url}/v1/ingest/alertmanager"
        hook["http_config"]["authorization"]["credentials_file"] = str(
            tmp_path / "jobtrail.token")
        (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(am_conf))
        rules = yaml.safe_load((DEPLOY / "gpu-health.rules.yml").read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                rule["for"] = "0s"
        (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
        prom_conf = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
        prom_conf["global"].update(scrape_interval="1s", evaluation_interval="1s")
        prom_conf["rule_files"] = ["rules.yml"]
        prom_conf["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] = [
            f"127.0.0.1:{am_port}"]
        prom_conf["scrape_configs"] = [
            {"job_name": "dcgm", "static_configs": [
                {"targets": [f"127.0.0.1:{exporter.port}"]}],
             "metric_relabel_configs": [{"source_labels": ["__name__"],
                                         "regex": "DCGM_.*", "action": "keep"}]},
            # node exporter's target carries `node` (deploy/prometheus/prometheus.yml)
            {"job_name": "node", "static_configs": [
                {"targets": [f"127.0.0.1:{exporter.port}"], "labels": {"node": NODE}}],
             "metric_relabel_configs": [{"source_labels": ["__name__"],
                                         "regex": "node_.*", "action": "keep"}]}]
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(prom_conf))
        am_url = f"http://127.0.0.1:{am_port}"
        daemons = [Daemon(["prometheus-alertmanager", "--config.file=alertmanager.yml",
                           "--storage.path=am", f"--web.listen-address=127.0.0.1:{am_port}",
                           "--cluster.listen-address="], tmp_path / "alertmanager.log",
                          f"{am_url}/-/ready")]
        try:
            daemons.append(Daemon(["prometheus", "--config.file=prometheus.yml",
                                   "--storage.tsdb.path=tsdb",
                                   f"--web.listen-address=127.0.0.1:{prom_port}"],
                                  tmp_path / "prometheus.log",
                                  f"http://127.0.0.1:{prom_port}/-/ready"))
            yield {"server": server, "exporter": exporter, "am": am_url,
                   "prom": f"http://127.0.0.1:{prom_port}", "token": "ops-token"}
        finally:
            for daemon in reversed(daemons):
                daemon.stop()


def _incidents(s: dict[str, Any]) -> list[dict[str, Any]]:
    reply = http("GET", f"{s['server'].url}/v1/incidents?include=infrastructure", token=s["token"])
    assert reply.status == 200, reply.body
    body = reply.body
    return list(body["incidents"] if isinstance(body, dict) else body)


def _incident(s: dict[str, Any], incident_id: str) -> dict[str, Any]:
    reply = http("GET", f"{s['server'].url}/v1/incidents/{incident_id}", token=s["token"])
    assert reply.status == 200, reply.body
    return dict(reply.body)


def _entity(s: dict[str, Any], name: str) -> list[dict[str, Any]]:
    reply = http("GET", f"{s['server'].url}/v1/entities/{urllib.parse.quote(name, safe='')}"
                 "/timeline?project=none", token=s["token"])
    assert reply.status == 200, reply.body
    return list(reply.body["rows"])


def _signals(incident: dict[str, Any]) -> list[str]:
    """The events added as signals, in log order (`opened` names its first one, which is
    also added)."""
    return [e["data"]["event_id"] for e in incident["log"] if e["kind"] == "signal_added"]


def test_firing_alert_opens_the_incident_resolved_ends_the_signal(
        stack: dict[str, Any]) -> None:
    s, exporter = stack, stack["exporter"]
    # the target is scraped and nothing fires while every GPU reports Xid 0
    _until("the exporter scraped", lambda: '"health":"up"' in urllib.request.urlopen(
        f"{s['prom']}/api/v1/targets", timeout=5).read().decode())
    assert _incidents(s) == []

    exporter.xid[3] = 79
    opened = _until("an incident", lambda: _incidents(s))
    assert len(opened) == 1
    incident = _incident(s, opened[0]["incident_id"])
    assert incident["log"][0]["kind"] == "opened"
    assert incident["log"][0]["data"]["entity"] == f"{NODE}/gpu3"
    assert incident["log"][0]["data"]["class"] == "gpu_hardware"
    assert incident["key"] == f"node:{NODE}"
    _until("its first signal", lambda: len(_signals(_incident(s, opened[0]["incident_id"]))))

    # a second GPU on the same node: the same incident (grouped by node)
    exporter.xid[5] = 79
    _until("the second GPU's signal",
           lambda: len(_signals(_incident(s, opened[0]["incident_id"]))) >= 2)
    assert len(_incidents(s)) == 1

    # Alertmanager repeats the group (repeat_interval 4s here): nothing doubles
    sent = _notifications(s["am"])
    _until("a repeated notification", lambda: _notifications(s["am"]) >= sent + 1, 30)
    time.sleep(1)
    again = _incident(s, opened[0]["incident_id"])
    assert len(_signals(again)) == len(set(_signals(again))) == 2, _signals(again)
    assert len(_incidents(s)) == 1

    # what Alertmanager itself holds for the two firing alerts (its start of each)
    firing = {a["labels"]["gpu"]: a for a in _am_alerts(s)}
    assert set(firing) == {"3", "5"}
    first = incident["log"][0]["data"]["first_event"]
    prefix = f"am-{firing['3']['fingerprint']}-"
    assert first.startswith(prefix) and first.endswith("-firing")
    assert _parse(first[len(prefix):-len("-firing")]) == _parse(firing["3"]["startsAt"])

    # resolved: the alert's end is on the GPU's timeline, ends its firing signal (one signal
    # with a start and an end), and it is not a new signal
    exporter.xid[3] = 0
    resolved = _until("the resolved event", lambda: [
        r for r in _entity(s, f"{NODE}/gpu3") if r["id"].endswith("-resolved")], 30)
    assert resolved[0]["type"] == "node.xid" and resolved[0]["node"] == NODE
    assert resolved[0]["id"].replace("-resolved", "-firing") == first
    ended = _until("the signal's end", lambda: _ended(_incident(s, opened[0]["incident_id"])))
    assert [(e["ends"], e["event_id"]) for e in ended] == [(first, resolved[0]["id"])]
    assert _parse(ended[0]["started_at"]) == _parse(firing["3"]["startsAt"])
    assert _parse(ended[0]["ended_at"]) == _parse(resolved[0]["time"]) > _parse(
        ended[0]["started_at"])
    after = _incident(s, opened[0]["incident_id"])
    assert _signals(after) == _signals(again)
    assert len(_incidents(s)) == 1
    assert after["status"] == "open"  # GPU 5's alert still fires

    # the last alert resolves: the condition is over, the incident moves on (mitigated by
    # the processor, saying so), and a person's resolve follows
    exporter.xid[5] = 0
    done = _until("the incident mitigated", lambda: (
        lambda inc: inc if inc["status"] == "mitigated" else None)(
            _incident(s, opened[0]["incident_id"])), 30)
    assert len(_ended(done)) == 2 and not _am_alerts(s)  # Alertmanager holds none firing
    [moved] = [e for e in done["log"] if e["kind"] == "mitigated"]
    assert moved["actor_kind"] == "processor"
    assert "every alert behind it resolved" in moved["data"]["text"]
    reply = http("POST", f"{s['server'].url}/v1/incidents/{opened[0]['incident_id']}/commands",
                 {"command": "resolve", "command_id": "resolve-after-alerts"},
                 token=s["token"])
    assert reply.status == 200, reply.body
    assert _incident(s, opened[0]["incident_id"])["status"] == "resolved"


def test_a_node_local_filesystem_alert_keeps_its_node(stack: dict[str, Any]) -> None:
    """node exporter's `/scratch` (ext4, the node's own disk) filling up is that node's; the
    shared Lustre mount filling up is the filesystem's, whichever node reported it."""
    s, exporter = stack, stack["exporter"]
    exporter.used_pct = {("/scratch", "ext4"): 40.0, ("/lustre/scratch", "lustre"): 40.0}
    _until("the node exporter target scraped", lambda: urllib.request.urlopen(
        f"{s['prom']}/api/v1/targets", timeout=5).read().decode().count('"health":"up"') == 2)
    exporter.used_pct = {("/scratch", "ext4"): 97.5, ("/lustre/scratch", "lustre"): 98.0}
    local = _until("the /scratch alert", lambda: _entity(s, f"{NODE}:/scratch"), 60)
    shared = _until("the Lustre alert", lambda: _entity(s, "/lustre/scratch"), 60)
    assert [(r["type"], r["node"], r["scope"]) for r in local] == [
        ("storage.capacity", NODE, "filesystem")]
    assert [(r["type"], r["node"]) for r in shared] == [("storage.capacity", "")]
    by_fs = {a["labels"]["mountpoint"]: a for a in _am_alerts(s)}
    assert by_fs["/scratch"]["labels"]["node"] == NODE  # what Alertmanager itself sent
    assert [r for r in _entity(s, NODE) if r["id"] == local[0]["id"]]  # on the node's timeline
    keys = {i["key"] for i in (_incident(s, x["incident_id"]) for x in _until(
        "both incidents", lambda: (lambda got: got if len(got) == 2 else None)(_incidents(s))))}
    assert keys == {f"storage:{NODE}:/scratch", "storage:/lustre/scratch"}


def _am_alerts(s: dict[str, Any]) -> list[dict[str, Any]]:
    """The alerts Alertmanager holds as active (its own API)."""
    with urllib.request.urlopen(f"{s['am']}/api/v2/alerts?active=true", timeout=5) as resp:
        return [a for a in json.loads(resp.read()) if a["status"]["state"] == "active"]


def _parse(text: str) -> datetime:
    """An RFC 3339 time to the millisecond (Alertmanager's API prints milliseconds, its
    webhook nanoseconds)."""
    at = datetime.fromisoformat(re.sub(r"(\.\d{3})\d*", r"\1", text).replace("Z", "+00:00"))
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def _ended(incident: dict[str, Any]) -> list[dict[str, Any]]:
    return [e["data"] for e in incident["log"] if e["kind"] == "signal_ended"]


def test_every_shipped_alert_maps_to_an_event() -> None:
    """Each rule's alert, with the labels and annotations it carries, is read by the
    Alertmanager mapping (no dead letter), firing and resolved."""
    import json as _json
    from datetime import UTC, datetime

    from ingest.adapters import Context, registry, run
    from processors.incidents.rules import load_rules
    from schemas.events import Event

    rules = yaml.safe_load((DEPLOY / "gpu-health.rules.yml").read_text())
    # what the exporters' series carry, as Prometheus would fill the templates
    filled = {"node": NODE, "xid": "79", "filesystem": "/lustre/scratch", "used_pct": "96.5",
              "kind": "dbe"}
    # node exporter targets carry `node` from relabel_configs (deploy/prometheus/prometheus.yml)
    series = {"gpu": "3", "Hostname": NODE, "node": NODE, "device": "mlx5_0", "port": "1",
              "mountpoint": "/lustre/scratch", "instance": f"{NODE}:9400", "job": "dcgm"}
    adapter = registry()["alertmanager"]
    rules_file = load_rules()
    for group in rules["groups"]:
        for rule in group["rules"]:
            labels = {**series, "alertname": rule["alert"], "cluster": "cluster-a",
                      **{k: filled.get(k, v) for k, v in rule["labels"].items()}}
            annotations = {k: filled.get(k, "text") for k in rule["annotations"]}
            for status, ends in (("firing", "0001-01-01T00:00:00Z"),
                                 ("resolved", "2026-12-06T01:05:00Z")):
                body = {"version": "4", "status": status, "receiver": "jobtrail",
                        "groupKey": "{}:{}", "alerts": [{
                            "status": status, "labels": labels, "annotations": annotations,
                            "startsAt": "2026-12-06T01:00:00Z", "endsAt": ends,
                            "fingerprint": "0e20b5e20b872ad4"}]}
                out = run(adapter, _json.dumps(body), Context(
                    producer="am", observed_at=datetime.now(UTC), origin="t"))
                assert len(out) == 1 and isinstance(out[0], Event), (rule["alert"], out)
                assert out[0].cluster == "cluster-a"
                assert out[0].attributes["alert_status"] == status
                if status == "firing":  # what the alert is for: a signal the rules weigh
                    event = out[0]
                    assert rules_file.signal_rule(event.type, event.attributes,
                                                  event.message) is not None, \
                        (rule["alert"], event.type, event.attributes)
