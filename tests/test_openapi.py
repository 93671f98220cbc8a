"""The API's OpenAPI document: in sync with the routes and the event registry, valid, and
honoured by the live app (schemathesis: no 5xx, responses and status codes as documented,
auth enforced)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    missing_required_header,
    negative_data_rejection,
    not_a_server_error,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from jobtrail.config import Settings
from jobtrail.http import create_app
from jobtrail.http.health import openapi_document
from jobtrail.learn import sample
from schemas.registry import REGISTRY
from tests.trust_kit import http, serve

DOCUMENT = openapi_document()
TOKENS = "tok-ops=*;tok-llm=llm-pretrain"


def test_every_route_is_documented_and_every_documented_route_exists(tmp_path: Path) -> None:
    app = create_app(Settings(home=tmp_path), backend=object())
    routes = {(r.method, r.resource.canonical) for r in app.router.routes()  # type: ignore[union-attr]
              if r.method != "HEAD"}
    documented = {(method.upper(), path) for path, item in DOCUMENT["paths"].items()
                  for method in item}
    assert routes == documented


def test_the_document_names_every_event_type_and_adapter() -> None:
    from ingest.adapters import registry

    schemas = DOCUMENT["components"]["schemas"]
    assert schemas["Event"]["properties"]["type"]["enum"] == sorted(REGISTRY)
    (adapter,) = [p for p in DOCUMENT["paths"]["/v1/ingest/{adapter}"]["post"]["parameters"]
                  if p.get("name") == "adapter"]
    assert adapter["schema"]["enum"] == sorted(registry())


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("openapi") / "home"
    env = {"JOBTRAIL_API_TOKENS": TOKENS,
           "JOBTRAIL_TOPOLOGY": str(Path(__file__).parent.parent / "examples/topology-64.yaml"),
           # generated subscriptions must never deliver anywhere: no loop, loopback only
           "JOBTRAIL_ALERTS_INTERVAL_S": "0", "JOBTRAIL_ALERT_HOSTS": "127.0.0.1"}
    with serve(home, env) as server:
        assert http("POST", f"{server.url}/v1/events", sample.jsonl().encode(),
                    token="tok-ops").status == 202
        deadline = time.monotonic() + 60
        while not http("GET", f"{server.url}/v1/incidents", token="tok-ops").body["incidents"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        yield server.url


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: object, value: object) -> bytes:
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


schema = schemathesis.openapi.from_dict(DOCUMENT)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance, ignored_auth,
          negative_data_rejection, positive_data_acceptance, missing_required_header]


def _unstated() -> set[str]:
    """Operations whose positive data a schema cannot state (tests/schemathesis.toml says
    why for each)."""
    import tomllib

    config = tomllib.loads((Path(__file__).parent / "schemathesis.toml").read_text())
    return {op["include-name"] for op in config["operations"]
            if op["checks"].get("positive_data_acceptance", {}).get("enabled") is False}


UNSTATED = _unstated()


@schema.parametrize()
@settings(max_examples=int(os.environ.get("JOBTRAIL_SCHEMATHESIS_N", "25")), deadline=None,
          derandomize=True,  # the same cases every run: CI green by construction
          suppress_health_check=list(HealthCheck))
def test_the_live_api_keeps_its_document(case: schemathesis.Case, live: str) -> None:
    checks = [c for c in CHECKS if c is not positive_data_acceptance] \
        if case.operation.label in UNSTATED else CHECKS
    case.call_and_validate(base_url=live, headers={"Authorization": "Bearer tok-ops"},
                           checks=checks)


def test_openapi_json_is_served(live: str) -> None:
    served = http("GET", f"{live}/openapi.json")
    assert served.status == 200 and served.body == json.loads(json.dumps(DOCUMENT))


@pytest.mark.timeout(1800)
def test_schemathesis_run_with_every_check_finds_nothing(live: str, tmp_path: Path) -> None:
    """`st run --checks all` over every phase (examples, coverage, fuzzing, stateful), as the
    finding was made: valid requests accepted, invalid ones refused, `Allow` right, no 5xx.
    Deterministic generation, so a failure reproduces."""
    import subprocess
    import sys

    st = Path(sys.executable).parent / "st"
    n = os.environ.get("JOBTRAIL_SCHEMATHESIS_RUN_N", "10")
    config = Path(__file__).parent / "schemathesis.toml"  # the two exceptions, with reasons
    run = subprocess.run(
        [str(st), "--config-file", str(config), "run", f"{live}/openapi.json",
         "-H", "Authorization: Bearer tok-ops", "-n", n, "--generation-deterministic",
         "--no-color"], capture_output=True, text=True, timeout=1500, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-12000:] + run.stderr[-2000:]
