"""deploy/ has no engine to run it here; these checks keep the files valid and secret-free."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_compose_services_are_complete() -> None:
    compose = yaml.safe_load((ROOT / "deploy/docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"kafka", "clickhouse", "worker", "api"}
    for name, service in services.items():
        assert "image" in service or "build" in service, name
    assert services["worker"]["command"] == ["worker"]
    dockerfile = services["worker"]["build"]["dockerfile"]
    assert (ROOT / dockerfile).exists()


def test_kubernetes_manifests_are_well_formed() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/k8s/jobtrail.yaml").read_text()))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ConfigMap", "Deployment", "Deployment", "Service"]
    for doc in docs:
        assert doc["apiVersion"] and doc["metadata"]["name"]
        if doc["kind"] == "Deployment":
            template = doc["spec"]["template"]
            assert doc["spec"]["selector"]["matchLabels"].items() <= \
                template["metadata"]["labels"].items()
            for container in template["spec"]["containers"]:
                assert container["args"][0] in {"worker", "serve"}


def test_no_literal_secrets_in_deploy() -> None:
    for path in (ROOT / "deploy").rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert not re.search(r"(?i)password\s*[:=]\s*[\"']?[A-Za-z0-9]{6,}", text), path
