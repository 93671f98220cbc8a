"""Every YAML or JSON document a tenant or a file gives us, parsed with limits.

A parser is an amplifier: a 1 KB YAML alias bomb ("billion laughs") expands into a billion
nodes once anything walks it, and a document nested a few thousand deep overflows the
recursive composers (PyYAML's, json's) into a RecursionError. So a document is read in two
passes: the first walks PyYAML's event stream (a state machine, not recursive) and refuses,
before anything is built, a document over `max_bytes`, nested deeper than `max_depth`, with
more than `max_aliases` aliases, or whose nodes, aliases expanded, number more than
`max_nodes`; only then is it constructed (with the safe loader). JSON is parsed by json and
then measured the same way. Every refusal is a `DocumentRefused` naming the limit, its value
and the setting that raises it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

# libyaml when built in (it is in the wheels): the same documents, several times faster
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Limits:
    """How big a document may be; the defaults fit every rules, topology and mapping file
    we ship with room to spare."""

    max_bytes: int = 4 * 1024 * 1024
    max_depth: int = 64
    max_aliases: int = 256
    max_nodes: int = 1_000_000


DEFAULT = Limits()
RULES = Limits(max_bytes=1024 * 1024, max_depth=32, max_aliases=64, max_nodes=100_000)
"""A rules change a tenant sends (monitor rules): small by nature."""
BODY = Limits(max_bytes=1024 * 1024, max_depth=32, max_aliases=0, max_nodes=100_000)
"""An HTTP command or subscription body: small, flat, never an alias."""


class DocumentRefused(ValueError):
    """A document past one of its `Limits`; the message names the limit."""

    def __init__(self, limit: str, value: int, detail: str, what: str = "") -> None:
        self.limit, self.value = limit, value
        where = f"{what}: " if what else ""
        super().__init__(f"{where}{detail} (limit {limit}={value})")


def _size(text: str | bytes, limits: Limits, what: str) -> None:
    size = len(text.encode("utf-8", errors="replace") if isinstance(text, str) else text)
    if size > limits.max_bytes:
        raise DocumentRefused("max_bytes", limits.max_bytes,
                              f"the document is {size} bytes", what)


def _measure_yaml(text: str | bytes, limits: Limits, what: str) -> None:
    """Walk the event stream: depth, aliases and the expanded node count, without building."""
    try:
        _walk(yaml.parse(text, Loader=_LOADER), limits, what)
    except yaml.YAMLError as exc:  # libyaml stops at 1000 levels by itself
        if "nesting depth" in str(exc):
            raise DocumentRefused("max_depth", limits.max_depth,
                                  "the document is nested deeper than allowed", what) from None
        raise


def _walk(events: Any, limits: Limits, what: str) -> None:
    expanded = aliases = 0
    anchored: dict[str, int] = {}  # anchor -> its node count, aliases inside expanded
    frames: list[list[Any]] = []  # open collections: [anchor, nodes so far]

    def add(nodes: int) -> None:
        nonlocal expanded
        expanded += nodes
        if expanded > limits.max_nodes:
            raise DocumentRefused("max_nodes", limits.max_nodes,
                                  "the document expands (aliases followed) to more nodes "
                                  "than allowed", what)
        if frames:
            frames[-1][1] += nodes

    for event in events:
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > limits.max_aliases:
                raise DocumentRefused("max_aliases", limits.max_aliases,
                                      "the document uses more YAML aliases than allowed", what)
            add(anchored.get(str(event.anchor), 1))
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor:
                anchored[event.anchor] = 1
            add(1)
        elif isinstance(event, yaml.CollectionStartEvent):
            if len(frames) >= limits.max_depth:
                raise DocumentRefused("max_depth", limits.max_depth,
                                      "the document is nested deeper than allowed", what)
            add(1)
            frames.append([event.anchor, 0])
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, nodes = frames.pop()
            if anchor:
                anchored[anchor] = nodes + 1
            if frames:  # an anchor on the parent covers this collection too
                frames[-1][1] += nodes


def load_yaml(text: str | bytes, limits: Limits = DEFAULT, what: str = "") -> Any:
    """One YAML document (None when empty), as `yaml.safe_load` reads it, within `limits`.
    Raises DocumentRefused (a limit) or yaml.YAMLError (not YAML)."""
    _size(text, limits, what)
    _measure_yaml(text, limits, what)
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader, measured first


def load_yaml_all(text: str | bytes, limits: Limits = DEFAULT, what: str = "") -> list[Any]:
    """Every document of a YAML stream (`---` separated), within `limits` taken together."""
    _size(text, limits, what)
    _measure_yaml(text, limits, what)
    return list(yaml.load_all(text, Loader=_LOADER))


def load_json(text: str | bytes, limits: Limits = BODY, what: str = "") -> Any:
    """One JSON value within `limits` (JSON has no aliases). Raises DocumentRefused (a limit)
    or ValueError (not JSON)."""
    _size(text, limits, what)
    try:
        value = json.loads(text)
    except RecursionError:
        raise DocumentRefused("max_depth", limits.max_depth,
                              "the document is nested deeper than allowed", what) from None
    _measure_value(value, limits, what)
    return value


def _measure_value(value: Any, limits: Limits, what: str) -> None:
    """Depth and node count of a parsed value, walked with an explicit stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise DocumentRefused("max_nodes", limits.max_nodes,
                                  "the document has more nodes than allowed", what)
        if isinstance(item, dict | list):
            if depth > limits.max_depth:
                raise DocumentRefused("max_depth", limits.max_depth,
                                      "the document is nested deeper than allowed", what)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
