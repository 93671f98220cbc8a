"""deploy/ has no engine to run it here; these checks keep the files valid and secret-free."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

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
                                                   "jobtrail-fleet"}
    for board in boards.values():
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == source["uid"]
