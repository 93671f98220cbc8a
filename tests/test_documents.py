"""Every YAML or JSON document a tenant or a file gives us is parsed with limits (issue 25,
finding 3): a billion-laughs alias bomb, a 3,000-deep nesting and an oversize document are
refused with an error naming the limit, everywhere one is read (monitor rules over HTTP and
their file, detection/routing rules, topology, adapter mapping files, scenario files,
Kubernetes payloads, HTTP JSON bodies)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from schemas import documents
from schemas.documents import BODY, DEFAULT, RULES, DocumentRefused, load_json, load_yaml

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
"""Nine levels of nine aliases: 9**9 (387 M) nodes once expanded, 1 KB as written."""
DEEP_YAML = "[" * 3000 + "]" * 3000
DEEP_JSON = '{"a": ' * 3000 + "1" + "}" * 3000


def _oversize(limits: documents.Limits) -> str:
    return "key: " + "x" * (limits.max_bytes + 10) + "\n"


BOMB = "(max_aliases|max_nodes)"


@pytest.mark.parametrize(("text", "limit"), [(LAUGHS, BOMB), (DEEP_YAML, "max_depth"),
                                             (_oversize(DEFAULT), "max_bytes")])
def test_the_loader_refuses_each_bomb_naming_the_limit(text: str, limit: str) -> None:
    with pytest.raises(DocumentRefused, match=f"limit {limit}=") as refused:
        load_yaml(text, what="rules.yaml")
    assert str(refused.value).startswith("rules.yaml: ")


def test_aliases_under_the_count_still_cannot_expand_past_the_node_limit() -> None:
    few = documents.Limits(max_aliases=1000, max_nodes=100_000)
    with pytest.raises(DocumentRefused, match="limit max_nodes=100000"):
        load_yaml(LAUGHS, few)
    # the same anchors used sparingly are fine: YAML merge keys in a rules file
    assert load_yaml("base: &b {x: 1}\nother: {<<: *b, y: 2}\n") == {
        "base": {"x": 1}, "other": {"x": 1, "y": 2}}


def test_json_depth_nodes_and_size() -> None:
    with pytest.raises(DocumentRefused, match="limit max_depth=32"):
        load_json(DEEP_JSON)
    with pytest.raises(DocumentRefused, match="limit max_depth=32"):
        load_json("[" * 40 + "]" * 40)
    with pytest.raises(DocumentRefused, match="limit max_nodes=100000"):
        load_json(json.dumps(list(range(BODY.max_nodes + 1))), BODY)
    with pytest.raises(DocumentRefused, match="limit max_bytes="):
        load_json(b"[" + b"1," * BODY.max_bytes + b"1]")
    assert load_json(b'{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}


# --- every place a document is read --------------------------------------------------------

def _bombs(limits: documents.Limits) -> list[tuple[str, str]]:
    return [(LAUGHS, BOMB), (DEEP_YAML, "max_depth"), (_oversize(limits), "max_bytes")]


def _file_readers(tmp: Path) -> list[tuple[str, Callable[[Path], Any]]]:
    from ingest import alertmanager, cloudevents
    from jobtrail.learn import scenarios
    from processors.incidents.rules import RulesError, load_rules
    from schemas.topology import TopologyError
    from schemas.topology import load as load_topology

    def rules(path: Path) -> Any:
        try:
            return load_rules(path)
        except RulesError as exc:
            raise DocumentRefused("?", 0, str(exc)) from None

    def topology(path: Path) -> Any:
        try:
            return load_topology(path)
        except TopologyError as exc:
            raise DocumentRefused("?", 0, str(exc)) from None

    return [("detection/routing rules", rules), ("topology", topology),
            ("alert mapping", alertmanager.load_mapping),
            ("cloudevents mapping", lambda p: cloudevents.load_mapping(str(p))),
            ("scenario", scenarios.load)]


@pytest.mark.parametrize("reader", range(5))
def test_every_file_reader_refuses_the_bombs(tmp_path: Path, reader: int) -> None:
    what, read = _file_readers(tmp_path)[reader]
    for text, limit in _bombs(DEFAULT):
        path = tmp_path / "doc.yaml"
        path.write_text(text)
        with pytest.raises(ValueError, match=f"limit {limit}=") as refused:
            read(path)
        assert str(path) in str(refused.value) or limit in str(refused.value), what


def test_monitor_rules_are_refused_with_the_limit(tmp_path: Path) -> None:
    """`POST .../postmortem/monitor` hands the body's `rules` text to `write_monitor`; the
    file form (`check_monitor`) reads the same way."""
    from jobtrail.learn.lessons import LearningFailed, check_monitor, write_monitor

    for text, limit in _bombs(RULES):
        with pytest.raises(LearningFailed, match=f"limit {limit}="):
            write_monitor(tmp_path / "sample.yaml", text, tmp_path / "monitor.yaml")
        rules = tmp_path / "rules.yaml"
        rules.write_text(text)
        sample = Path(__file__).parent / "scenarios" / "incidents"
        with pytest.raises(DocumentRefused, match=f"limit {limit}="):
            check_monitor(sample / "consequences-join-the-cause.yaml", rules)
    assert not (tmp_path / "monitor.yaml").exists()


def test_a_kubernetes_payload_bomb_is_a_dead_letter_naming_the_limit() -> None:
    from ingest.adapters import Context, registry, run
    from schemas.dead_letters import DeadLetter

    ctx = Context(producer="t", observed_at=datetime(2026, 11, 30, tzinfo=UTC))
    for text, limit in ((LAUGHS, "max_aliases"), ("a:\n" + DEEP_YAML, "max_depth")):
        (letter,) = run(registry()["kubernetes"], text, ctx)
        assert isinstance(letter, DeadLetter) and f"limit {limit}=" in letter.reason


def test_http_json_bodies_refuse_deep_nesting_with_400(tmp_path: Path) -> None:
    from tests.trust_kit import http, serve

    deep = DEEP_JSON.encode()
    with serve(tmp_path / "home") as server:
        for path in ("/v1/incidents/i-1/commands", "/v1/subscriptions", "/v1/silences",
                     "/v1/incidents/i-1/postmortem/monitor"):
            reply = http("POST", f"{server.url}{path}", deep)
            assert reply.status in (400, 404, 422), (path, reply)
            assert reply.status != 500
