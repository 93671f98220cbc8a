"""deploy/ has no engine to run it here; these checks keep the files valid and secret-free:
the compose file against the Compose specification's JSON Schema (check-jsonschema's vendored
copy), the Kubernetes manifests against the API schemas of the versions we target
(kubernetes-validate, strict: unknown fields are errors)."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobtrail.config import Settings
from jobtrail.variables import SettingError

ROOT = Path(__file__).resolve().parent.parent


def test_compose_services_are_complete() -> None:
    compose = yaml.safe_load((ROOT / "deploy/docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"kafka", "clickhouse", "worker", "api", "notify", "grafana"}
    assert services["notify"]["command"] == ["notify"]
    for name, service in services.items():
        assert "image" in service or "build" in service, name
    assert services["worker"]["command"] == ["worker"]
    dockerfile = services["worker"]["build"]["dockerfile"]
    assert (ROOT / dockerfile).exists()


def test_kubernetes_manifests_are_well_formed() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/k8s/jobtrail.yaml").read_text()))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ConfigMap", "Deployment", "Deployment", "Deployment", "Service"]
    for doc in docs:
        assert doc["apiVersion"] and doc["metadata"]["name"]
        if doc["kind"] == "Deployment":
            template = doc["spec"]["template"]
            assert doc["spec"]["selector"]["matchLabels"].items() <= \
                template["metadata"]["labels"].items()
            for container in template["spec"]["containers"]:
                assert container["args"][0] in {"worker", "serve", "notify"}


KUBERNETES_TARGETS = ("1.31.0", "1.37.0")
"""The oldest Kubernetes we support and the newest the validator knows."""


def _compose_errors(path: Path) -> str:
    run = subprocess.run([str(Path(sys.executable).parent / "check-jsonschema"),
                          "--builtin-schema", "vendor.compose-spec", str(path)],
                         capture_output=True, text=True, timeout=120, check=False)
    return "" if run.returncode == 0 else run.stdout + run.stderr


def test_the_compose_file_follows_the_compose_specification(tmp_path: Path) -> None:
    assert _compose_errors(ROOT / "deploy/docker-compose.yml") == ""
    broken = yaml.safe_load((ROOT / "deploy/docker-compose.yml").read_text())
    broken["services"]["worker"]["restart"] = ["unless-stopped"]  # a list where a string goes
    path = tmp_path / "compose.yml"
    path.write_text(yaml.safe_dump(broken))
    assert "restart" in _compose_errors(path)  # the check can fail


@pytest.mark.parametrize("version", KUBERNETES_TARGETS)
def test_kubernetes_manifests_validate_against_the_target_versions(version: str) -> None:
    import kubernetes_validate

    docs = list(yaml.safe_load_all((ROOT / "deploy/k8s/jobtrail.yaml").read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    worker = copy.deepcopy(next(d for d in docs if d["metadata"]["name"] == "jobtrail-worker"))
    worker["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["pth"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):  # the check can fail
        kubernetes_validate.validate(worker, version, strict=True)


def test_workers_expose_probes_and_take_the_wire_key_from_a_secret() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/k8s/jobtrail.yaml").read_text()))
    worker = next(d for d in docs if d["metadata"]["name"] == "jobtrail-worker")
    container = worker["spec"]["template"]["spec"]["containers"][0]
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    port = int(config["JOBTRAIL_WORKER_PORT"])
    assert container["ports"] == [{"containerPort": port, "name": "probes"}]
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert "JOBTRAIL_WIRE_KEY" not in config  # a secret: from the Secret, never the ConfigMap
    compose = yaml.safe_load((ROOT / "deploy/docker-compose.yml").read_text())["services"]
    assert compose["worker"]["environment"]["JOBTRAIL_WIRE_KEY"].startswith("${")
    assert "9108/livez" in " ".join(compose["worker"]["healthcheck"]["test"])


def test_no_literal_secrets_in_deploy() -> None:
    for path in (ROOT / "deploy").rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert not re.search(r"(?i)password\s*[:=]\s*[\"']?[A-Za-z0-9]{6,}", text), path


def test_grafana_provisioning_matches_the_dashboards() -> None:
    from dashboards.build import committed
    from dashboards.clickhouse import PLUGIN, UID
    from dashboards.common import FOLDER_UID

    sources = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/jobtrail.yaml")
                             .read_text())["datasources"]
    (source,) = sources
    assert (source["uid"], source["type"]) == (UID, PLUGIN)
    assert source["jsonData"]["username"] == "grafana_ro"  # the read-only user
    assert source["secureJsonData"]["password"].startswith("$")  # a reference, not a secret
    users = (ROOT / "deploy/clickhouse/users.d/grafana_ro.xml").read_text()
    assert "<grafana_ro>" in users and "<readonly>1</readonly>" in users
    assert 'from_env="CLICKHOUSE_GRAFANA_PASSWORD"' in users
    (provider,) = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/jobtrail.yaml")
                                 .read_text())["providers"]
    assert provider["folderUid"] == FOLDER_UID and provider["allowUiUpdates"] is False
    grafana = yaml.safe_load((ROOT / "deploy/docker-compose.yml").read_text())["services"][
        "grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"])
    assert mounts["../dashboards/json"] == provider["options"]["path"]
    boards = committed()
    assert {b["uid"] for b in boards.values()} == {"jobtrail-job", "jobtrail-incident",
                                                   "jobtrail-fleet", "jobtrail-entity",
                                                   "jobtrail-oncall"}
    for board in boards.values():
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == source["uid"]


def _container_settings(docs: list[dict[str, Any]], name: str,
                        secret: dict[str, str]) -> Settings:
    """The settings a container of the manifest starts with, given the Secret's keys."""
    deployment = next(d for d in docs if d["metadata"]["name"] == name)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    env = {**config, **secret, **{e["name"]: e["value"] for e in container.get("env", [])}}
    settings = Settings.from_env(env)
    args = container["args"]
    if "--host" in args:
        settings = settings.with_(http_host=args[args.index("--host") + 1])
    return settings


def test_the_api_deployment_starts_only_with_a_credential_in_the_secret() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/k8s/jobtrail.yaml").read_text()))
    secret = {"JOBTRAIL_CLICKHOUSE": "https://jobtrail:pw@clickhouse.db.svc:8443",
              "JOBTRAIL_WIRE_KEY": "k" * 32}
    with pytest.raises(SettingError, match=re.escape("JOBTRAIL_HTTP_HOST: '0.0.0.0'")):
        _container_settings(docs, "jobtrail-api", secret).check_listener()
    _container_settings(docs, "jobtrail-api", {**secret, "JOBTRAIL_API_TOKENS":
                                               "tok-ops=*,role:admin"}).check_listener()
    worker = _container_settings(docs, "jobtrail-worker", secret)  # probes only: no refusal
    assert (worker.http_host, worker.worker_port, worker.authenticated) == ("0.0.0.0", 9108,
                                                                            False)
    header = (ROOT / "deploy/k8s/jobtrail.yaml").read_text().split("apiVersion", 1)[0]
    assert "JOBTRAIL_API_TOKENS" in header and "refuses to start" in header
    compose = yaml.safe_load((ROOT / "deploy/docker-compose.yml").read_text())["services"]
    assert compose["api"]["environment"]["JOBTRAIL_API_TOKENS"].startswith("${JOBTRAIL_API_"
                                                                          "TOKENS:?")
