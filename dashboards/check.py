"""Offline checks for the dashboards (no Grafana server runs here), `jobtrail dashboards
check` and the tests:

1. the built JSON equals the committed JSON;
2. the foundation SDK decodes and re-encodes each dashboard with no key lost or added;
3. lint, what can be seen without running a query: every target is a pinned ClickHouse SQL
   target whose format fits its panel type; every `$__macro` is one the plugin knows; every
   `$variable` (targets, variable queries, annotations, data links, dashboard links) is
   defined and uses a format Grafana and `dashboards.interpolate` agree on; panel ids are
   unique; panels lie within the 24-column grid and do not overlap; a link into another
   dashboard (`/d/<uid>?var-x=...`) names a dashboard that exists and only variables it
   defines; no column alias hides a column the same query's filter binds to a variable
   (ClickHouse resolves `WHERE toString(attempt) = ...` to an `... AS attempt` alias);
4. `expand` (`dashboards.interpolate`) turns a target into the SQL the plugin would run, so
   the tests run every query against the real schema in chDB.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from dashboards.clickhouse import LOGS, PLUGIN, TABLE, TIME_SERIES, TRACES, UID
from dashboards.interpolate import FORMATS, MACROS, VARIABLE, expand

__all__ = ["ANNOTATION_COLUMNS", "COLUMNS", "expand", "lint", "roundtrip", "targets"]

GRID = 24
# which query formats each panel type can draw
FITS: dict[str, set[int]] = {
    "logs": {LOGS}, "traces": {TRACES}, "timeseries": {TIME_SERIES},
    "state-timeline": {TABLE}, "table": {TABLE}, "stat": {TABLE, TIME_SERIES},
    "barchart": {TABLE}, "annotation": {TABLE},
}
# columns each format must return (notes/grafana.md)
COLUMNS: dict[int, set[str]] = {
    TIME_SERIES: {"time"}, LOGS: {"timestamp", "body", "level"},
    TRACES: {"traceID", "spanID", "parentSpanID", "serviceName", "operationName",
             "startTime", "duration"},
}
ANNOTATION_COLUMNS = {"time", "text"}
FRONTEND_MACROS = {"__from", "__to"}
"""Scenes macros a SQL target may use (`dashboards.interpolate` expands them)."""
LINK_VARIABLES = {"__data", "__value", "__url_time_range", "__field", "__series", "__from",
                  "__to", "__dashboard", "__user", "__org"}
"""What a data link may interpolate besides the dashboard's own variables."""
_MACRO = re.compile(r"\$__(\w+)")
_DASHBOARD_LINK = re.compile(r"^/d/([\w-]+)")


def panels(board: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for p in board.get("panels", []):
        yield p
        yield from p.get("panels", [])  # rows


def targets(board: Mapping[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(panel type, panel title, target) of every query, annotations included."""
    for p in panels(board):
        for t in p.get("targets", []):
            yield p.get("type", ""), p.get("title", ""), t
    for a in board.get("annotations", {}).get("list", []):
        if a.get("target"):
            yield "annotation", a.get("name", ""), a["target"]


def variables(board: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(board.get("templating", {}).get("list", []))


def links(board: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, url) of every link: the dashboard's and each panel's data links."""
    for link in board.get("links", []):
        yield f"dashboard link {link.get('title')!r}", str(link.get("url", ""))
    for p in panels(board):
        for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", []):
            yield f"panel {p.get('title')!r} link {link.get('title')!r}", \
                str(link.get("url", ""))


def _references(text: str) -> Iterator[tuple[str, str | None]]:
    for m in VARIABLE.finditer(text):
        yield m.group(1) or m.group(2) or m.group(4), m.group(3) or m.group(6)


def layout(board: Mapping[str, Any]) -> list[str]:
    """Each panel inside the 24 columns, with a size, overlapping no other."""
    problems: list[str] = []
    placed: list[tuple[str, tuple[int, int, int, int]]] = []
    for p in board.get("panels", []):
        g = p.get("gridPos") or {}
        x, y, w, h = (int(g.get(k, -1)) for k in ("x", "y", "w", "h"))
        name = repr(p.get("title"))
        if min(x, y) < 0 or w <= 0 or h <= 0:
            problems.append(f"panel {name}: gridPos {g} needs x, y >= 0 and w, h > 0")
            continue
        if x + w > GRID:
            problems.append(f"panel {name}: x {x} + width {w} overflows the {GRID}-column grid")
        for other, (ox, oy, ow, oh) in placed:
            if x < ox + ow and ox < x + w and y < oy + oh and oy < y + h:
                problems.append(f"panel {name} overlaps panel {other}")
        placed.append((name, (x, y, w, h)))
    return problems


def _scopes(sql: str) -> list[int]:
    """For each character, the position of the subquery parenthesis it is in (-1: the top
    query). Only `(SELECT` opens a scope: a function's or a condition's parentheses do not."""
    out, stack, quoted = [], [-1], False
    for i, c in enumerate(sql):
        if c == "'":
            quoted = not quoted
        elif not quoted and c == "(":
            out.append(stack[-1])
            opens = re.match(r"\(\s*SELECT\b", sql[i:i + 40], re.I) is not None
            stack.append(i if opens else stack[-1])
            continue
        elif not quoted and c == ")" and len(stack) > 1:
            stack.pop()
        out.append(stack[-1])
    return out


_BOUND = re.compile(r"(?:\w+\()?\b([A-Za-z_]\w*)\)?\s*(?:=|!=|IN)\s*\(?\s*\$")
_ALIAS = re.compile(r"(\S+)\s+AS\s+([A-Za-z_]\w*)", re.I)


def shadowing(sql: str) -> list[str]:
    """Aliases that reuse the name of a column the same query compares with a variable."""
    scope = _scopes(sql)
    bound = {(m.group(1), scope[m.start(1)]) for m in _BOUND.finditer(sql)}
    out = []
    for m in _ALIAS.finditer(sql):
        expression, name = m.group(1), m.group(2)
        if expression == name or expression.endswith("." + name):
            continue  # the column itself
        if (name, scope[m.start(2)]) in bound:
            out.append(f"alias {name!r} ({expression} AS {name}) hides the column the filter "
                       f"binds: rename the alias")
    return out


def _link_targets(url: str, where: str, boards: Mapping[str, Mapping[str, Any]]) -> list[str]:
    m = _DASHBOARD_LINK.match(url)
    if m is None:
        return []
    by_uid = {b.get("uid"): b for b in boards.values()}
    target = by_uid.get(m.group(1))
    if target is None:
        return [f"{where}: no dashboard with uid {m.group(1)}"]
    defined = {v["name"] for v in variables(target)}
    return [f"{where}: var-{key[4:]} is not a variable of {m.group(1)}"
            for key, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True)
            if key.startswith("var-") and key[4:] not in defined]


def lint(board: Mapping[str, Any],
         boards: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """Everything wrong that shows without a query; links are checked against `boards`
    (default: every built dashboard, with this one in its place)."""
    if boards is None:
        from dashboards.build import built

        boards = {**built(), "_": board}
        boards = {k: v for k, v in boards.items()
                  if k == "_" or v.get("uid") != board.get("uid")}
    problems = []
    ids = [p.get("id") for p in panels(board)]
    if None in ids or len(ids) != len(set(ids)):
        problems.append(f"panel ids must be set and unique: {ids}")
    problems += layout(board)
    defined = {v["name"] for v in variables(board)}
    queries: list[tuple[str, str]] = [(f"variable {v['name']}", str(v.get("query", "")))
                                      for v in variables(board) if v.get("type") == "query"]
    for kind, title, t in targets(board):
        where = f"{kind} {title!r} {t.get('refId')}"
        ds = t.get("datasource") or {}
        if (ds.get("type"), ds.get("uid")) != (PLUGIN, UID):
            problems.append(f"{where}: data source must be {PLUGIN} uid {UID}, got {ds}")
        if t.get("editorType") != "sql" or not t.get("rawSql"):
            problems.append(f"{where}: needs editorType sql and rawSql")
        fmt = t.get("format")
        if fmt not in FITS.get(kind, set()):
            problems.append(f"{where}: format {fmt} cannot be drawn by a {kind} panel")
        queries.append((where, str(t.get("rawSql", ""))))
    for where, text in queries:
        for macro in _MACRO.findall(text):
            if macro not in MACROS and f"__{macro}" not in FRONTEND_MACROS:
                problems.append(f"{where}: unknown macro $__{macro}")
        for name, fmt in _references(text):
            if name.startswith("__"):
                continue
            if name not in defined:
                problems.append(f"{where}: ${name} is not a dashboard variable")
            if fmt is not None and fmt.partition(":")[0] not in FORMATS:
                problems.append(f"{where}: ${{{name}:{fmt}}}: format {fmt!r} is not one "
                                f"the checks implement ({', '.join(sorted(FORMATS))})")
        problems += [f"{where}: {p}" for p in shadowing(text)]
    for where, url in links(board):
        for name, _ in _references(url):
            if name not in defined and name not in LINK_VARIABLES:
                problems.append(f"{where}: uses undefined ${name}")
        problems += _link_targets(url, where, boards)
    return problems


def roundtrip(board: Mapping[str, Any]) -> list[str]:
    """Keys the SDK does not know (lost on decode) or invents (added on encode)."""
    from grafana_foundation_sdk.cog import plugins
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    from dashboards.clickhouse import register

    plugins.register_default_plugins()
    register()
    back = json.loads(json.dumps(Dashboard.from_json(dict(board)), cls=JSONEncoder))
    out: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(f"lost {path}.{k}" for k in a if k not in b)
            out.extend(f"added {path}.{k}" for k in b if k not in a)
            for k in a.keys() & b.keys():
                walk(a[k], b[k], f"{path}.{k}")
        elif isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                out.append(f"length {path}")
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                walk(x, y, f"{path}[{i}]")
        elif a != b:
            out.append(f"changed {path}")

    walk(dict(board), back, "")
    return out
