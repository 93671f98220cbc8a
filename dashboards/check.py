"""Offline checks for the dashboards (no Grafana server runs here), `jobtrail dashboards
check` and the tests:

1. the built JSON equals the committed JSON;
2. the foundation SDK decodes and re-encodes each dashboard with no key lost or added;
3. lint: every target is a pinned ClickHouse SQL target whose format fits its panel type,
   every `$__macro` is one the plugin knows, every `$variable` is defined, panel ids unique;
4. `expand` turns a target into the SQL the plugin would run (macros as the plugin's backend
   expands them, variables as Grafana's frontend interpolates them), so the tests can run
   every panel against the real schema in chDB.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from datetime import date, datetime
from typing import Any

from dashboards.clickhouse import LOGS, PLUGIN, TABLE, TIME_SERIES, TRACES, UID

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
MACROS = {"timeFilter", "timeFilter_ms", "dateFilter", "fromTime", "toTime", "fromTime_ms",
          "toTime_ms", "timeInterval", "timeInterval_ms", "interval_s", "timeFrom", "timeTo",
          "timeGroup", "conditionalAll"}
BUILTIN_VARIABLES = {"__data", "__value", "__url_time_range", "__field", "__series",
                     "__from", "__to", "__interval", "__interval_ms", "__dashboard", "__user",
                     "__org", "__timeFilter"}
_VAR = re.compile(r"\$\{(\w+)(?::(\w+))?(?:\.[\w.]+)?\}|\$(\w+)")
_MACRO = re.compile(r"\$__(\w+)")


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


def lint(board: Mapping[str, Any]) -> list[str]:
    problems = []
    ids = [p.get("id") for p in panels(board)]
    if None in ids or len(ids) != len(set(ids)):
        problems.append(f"panel ids must be set and unique: {ids}")
    defined = {v["name"] for v in variables(board)}
    queries: list[tuple[str, str]] = [(f"variable {v['name']}", str(v.get("query", "")))
                                      for v in variables(board)]
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
            if macro not in MACROS and f"__{macro}" not in BUILTIN_VARIABLES:
                problems.append(f"{where}: unknown macro $__{macro}")
        for braced, _, bare in _VAR.findall(text):
            name = braced or bare
            if name.startswith("__"):
                continue
            if name not in defined:
                problems.append(f"{where}: ${name} is not a dashboard variable")
    for p in panels(board):
        for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", []):
            for braced, _, bare in _VAR.findall(str(link.get("url", ""))):
                name = braced or bare
                if not name.startswith("__") and name not in defined:
                    problems.append(f"panel {p.get('title')!r}: link uses undefined ${name}")
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


def _sqlstring(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _args(text: str, start: int) -> tuple[list[str], int]:
    """Comma-separated macro arguments from the `(` at `start`; returns (args, end)."""
    depth, i, current, args = 0, start, "", []
    while i < len(text):
        ch = text[i]
        if ch == "(":
            depth += 1
            if depth > 1:
                current += ch
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(current.strip())
                return args, i + 1
            current += ch
        elif ch == "," and depth == 1:
            args.append(current.strip())
            current = ""
        else:
            current += ch
        i += 1
    raise ValueError(f"unclosed macro call at {start}")


def expand(sql: str, values: Mapping[str, str | list[str]], start: datetime, end: datetime,
           interval_s: int = 60) -> str:
    """The SQL `grafana-clickhouse-datasource` v4.19+ runs for this target."""
    def variable(match: re.Match[str]) -> str:
        braced, fmt, bare = match.group(1), match.group(2), match.group(3)
        name = braced or bare
        if name.startswith("__") or name not in values:
            return match.group(0)
        value = values[name]
        items = value if isinstance(value, list) else [value]
        if fmt == "sqlstring":
            return _sqlstring(",".join(items))
        if fmt == "singlequote":
            return ",".join(_sqlstring(v) for v in items)
        return ",".join(items)

    text = _VAR.sub(variable, sql)
    f, t = int(start.timestamp()), int(end.timestamp())
    fms, tms = int(start.timestamp() * 1000), int(end.timestamp() * 1000)
    simple = {
        "fromTime": f"toDateTime({f})", "toTime": f"toDateTime({t})",
        "fromTime_ms": f"fromUnixTimestamp64Milli({fms})",
        "toTime_ms": f"fromUnixTimestamp64Milli({tms})", "interval_s": str(max(1, interval_s)),
    }
    out, i = "", 0
    while True:
        m = _MACRO.search(text, i)
        if m is None:
            return out + text[i:]
        name = m.group(1)
        out += text[i:m.start()]
        if name in simple and text[m.end():m.end() + 1] != "(":
            out += simple[name]
            i = m.end()
            continue
        if text[m.end():m.end() + 1] != "(":
            raise ValueError(f"unknown or argument-less macro $__{name}")
        args, i = _args(text, m.end())
        c = args[0] if args else ""
        if name == "timeFilter":
            out += f"{c} >= toDateTime({f}) AND {c} <= toDateTime({t})"
        elif name == "timeFilter_ms":
            out += (f"{c} >= fromUnixTimestamp64Milli({fms}) AND "
                    f"{c} <= fromUnixTimestamp64Milli({tms})")
        elif name == "dateFilter":
            d0, d1 = date.fromtimestamp(f), date.fromtimestamp(t)
            out += f"{c} >= toDate('{d0}') AND {c} <= toDate('{d1}')"
        elif name == "timeInterval":
            out += f"toStartOfInterval(toDateTime({c}), INTERVAL {max(1, interval_s)} second)"
        elif name == "timeInterval_ms":
            out += (f"toStartOfInterval(toDateTime64({c}, 3), "
                    f"INTERVAL {max(1, interval_s) * 1000} millisecond)")
        elif name == "timeFrom":
            out += f"{c} >= toDateTime({f})"
        elif name == "timeTo":
            out += f"{c} <= toDateTime({t})"
        elif name == "conditionalAll":
            value = values.get(args[1].lstrip("$").strip("{}"), "") if len(args) > 1 else ""
            out += "1=1" if value in ("", "all", "$__all") else args[0]
        else:
            raise ValueError(f"macro $__{name} is not expanded here")

