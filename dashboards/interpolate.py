"""The SQL a dashboard target becomes on its way to ClickHouse, in Grafana's three steps, so
tests and `jobtrail timeline --png` run exactly what Grafana would run:

1. `$__conditionalAll(condition, $var)`: the plugin's frontend, before anything else; the
   condition, or `1=1` when the variable's current value is All or empty
   (grafana/clickhouse-datasource v4.20.0 `src/data/CHDatasource.ts`, `applyConditionalAll`
   and `getMacroArgs`);
2. dashboard variables, as Grafana 12's scenes interpolate them (grafana/scenes
   `packages/scenes/src/variables/interpolation/sceneInterpolator.ts` and `formatRegistry.ts`,
   `variants/MultiValueVariable.ts`): `${v:sqlstring}` and `${v:singlequote}` quote each value,
   a plain `$v` goes through the plugin's own format (`CHDatasource.format`: several values as
   `'a','b'`, unescaped; one value raw). "All" is every option's value, or, when the
   variable has a custom all value, that text raw whatever the format (`CustomAllValue`);
3. the backend macros (`pkg/macros/macros.go` over grafana/macropro `parser.go` and
   `defaults.go`): names matched whole, longest first; an unknown `$__x` is left in the SQL
   (and fails there); a macro given the wrong number of arguments fails the query.

The plugin's source was read at grafana/clickhouse-datasource commit 1d04063a (4.20.0), the
version `deploy/docker-compose.yml` runs; /work/shared/notes/grafana.md has the table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

ALL = "$__all"
"""The current value of a variable set to All (scenes `ALL_VARIABLE_VALUE`)."""


@dataclass(frozen=True)
class Chosen:
    """A variable as Grafana holds it: its current value (one, several, or ALL), the values
    its query offered (what All stands for) and its custom all value, if it has one."""

    value: str | tuple[str, ...]
    options: tuple[str, ...] = ()
    all_value: str | None = None

    @property
    def is_all(self) -> bool:
        return self.value == ALL or (isinstance(self.value, tuple) and self.value[:1] == (ALL,))

    def current(self) -> str:
        """`current.value.toString()`, what `$__conditionalAll` reads (JS joins with `,`)."""
        return self.value if isinstance(self.value, str) else ",".join(self.value)


Values = Mapping[str, "str | Sequence[str] | Chosen"]


def chosen(value: str | Sequence[str] | Chosen) -> Chosen:
    if isinstance(value, Chosen):
        return value
    if isinstance(value, str):
        return Chosen(value)
    return Chosen(tuple(value))


# --- 1. $__conditionalAll (plugin frontend) ---------------------------------------------------

_CONDITIONAL = "$__conditionalAll("
_VAR_IN_ARG = re.compile(r"(?<=\$\{)[\w\d]+(?=\})|(?<=\$)[\w\d]+")


def _frontend_args(query: str, args_index: int) -> list[str]:
    """`getMacroArgs`: split at top-level commas from the `(` at `args_index`; parentheses
    are counted even inside string literals, as the plugin does."""
    args: list[str] = []
    depth, last = 0, 1
    sub = query[args_index:]
    for m in re.finditer(r"\(|\)|,", sub):
        found = m.group(0)
        if found == "(":
            depth += 1
        elif found == ")":
            depth -= 1
        if found == "," and depth == 1:
            args.append(sub[last:m.end() - 1])
            last = m.end()
        if depth == 0:
            args.append(sub[last:m.end() - 1])
            return args
    return []


def _js_replace_first(text: str, pattern: str, replacement: str) -> str:
    """`String.prototype.replace(string, string)`: the first occurrence, with `$$`, `$&`,
    `` $` `` and `$'` in the replacement meaning what JavaScript makes them mean."""
    at = text.find(pattern)
    if at < 0:
        return text
    special = {"$$": "$", "$&": pattern, "$`": text[:at], "$'": text[at + len(pattern):]}
    out = re.sub(r"\$[$&`']", lambda m: special[m.group(0)], replacement)
    return text[:at] + out + text[at + len(pattern):]


def conditional_all(query: str, values: Values) -> str:
    """`applyConditionalAll`, from the last macro back to the first."""
    at = query.rfind(_CONDITIONAL)
    while at != -1:
        params = _frontend_args(query, at + len(_CONDITIONAL) - 1)
        if len(params) != 2:
            return query
        phrase = params[0]
        name = _VAR_IN_ARG.search(params[1].strip())
        if name and name.group(0) in values:
            current = chosen(values[name.group(0)]).current()
            if current in ("", ALL):
                phrase = "1=1"
        query = _js_replace_first(query, f"{_CONDITIONAL}{params[0]},{params[1]})", phrase)
        at = query.rfind(_CONDITIONAL)
    return query


# --- 2. dashboard variables (Grafana scenes) ---------------------------------------------------

VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]"
                      r"|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}")
"""scenes `VARIABLE_REGEX`: `$v`, `[[v:fmt]]`, `${v.field:fmt}`."""


def _quoted(values: Sequence[str] | str, quote: str, escape: Mapping[str, str]) -> str:
    def one(v: str) -> str:
        return quote + "".join(escape.get(c, c) for c in v) + quote
    return one(values) if isinstance(values, str) else ",".join(one(v) for v in values)


def _format(value: str | list[str], fmt: str | None) -> str:
    """The formatter `fmt` names (`formatRegistry`); None is the plugin's own format."""
    if fmt is None:  # CHDatasource.format
        return "'" + "','".join(value) + "'" if isinstance(value, list) else value
    name, _, arg = fmt.partition(":")
    if name == "sqlstring":
        return _quoted(value, "'", {"'": "''", '"': '\\"'})
    if name == "singlequote":
        return _quoted(value, "'", {"'": "\\'"})
    if name == "doublequote":
        return _quoted(value, '"', {'"': '\\"'})
    if name in ("csv", "join"):
        return (arg or ",").join(value) if isinstance(value, list) else value
    if name == "pipe":
        return "|".join(value) if isinstance(value, list) else value
    if name == "raw":
        return ",".join(value) if isinstance(value, list) else value
    if name == "glob":
        return "{" + ",".join(value) + "}" if isinstance(value, list) and len(value) > 1 \
            else (",".join(value) if isinstance(value, list) else value)
    raise ValueError(f"variable format {fmt!r} is not one the dashboards may use")


FORMATS = {"sqlstring", "singlequote", "doublequote", "csv", "join", "pipe", "raw", "glob",
           "text"}
"""The formats `_format` implements (and so the only ones lint lets a dashboard use)."""


def _value(var: Chosen, field: str | None, fmt: str | None, values: Values,
           start: datetime, end: datetime) -> str:
    if var.is_all and var.all_value is not None:  # CustomAllValue.formatter
        if fmt == "text":
            return "All"
        return variables(var.all_value, values, start, end)
    if fmt == "text":
        return "All" if var.is_all else (var.value if isinstance(var.value, str)
                                         else " + ".join(var.value))
    value: str | list[str] = list(var.options) if var.is_all else (
        var.value if isinstance(var.value, str) else list(var.value))
    if field is not None and isinstance(value, list) and field.isdigit() \
            and int(field) < len(value):
        value = value[int(field)]
    return _format(value, fmt)


def _macro_variable(name: str, fmt: str | None, start: datetime, end: datetime) -> str | None:
    """The scenes macros a SQL target may use: `$__from` and `$__to` (epoch ms)."""
    at = {"__from": start, "__to": end}.get(name)
    if at is None:
        return None
    ms = int(at.timestamp() * 1000)
    if fmt in ("date:seconds",):
        return str(round(ms / 1000))
    return str(ms)


def variables(text: str, values: Values, start: datetime, end: datetime) -> str:
    """`sceneInterpolator`: every variable reference replaced; an unknown one is kept."""
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if name not in values:
            macro = _macro_variable(name, fmt, start, end)
            return m.group(0) if macro is None else macro
        return _value(chosen(values[name]), m.group(5), fmt, values, start, end)

    return VARIABLE.sub(one, text)


# --- 3. backend macros (pkg/macros over macropro) ----------------------------------------------

class MacroError(ValueError):
    """The plugin's backend refuses the query (a macro's arguments are wrong)."""


def _closing(s: str) -> int:
    """macropro `findClosingParen` from the `(` at 0, skipping quoted strings; -1 if none."""
    depth, i = 0, 0
    while i < len(s):
        c = s[i]
        if c in "'\"":
            i = _string_end(s, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _string_end(s: str, pos: int) -> int:
    quote, j = s[pos], pos + 1
    while j < len(s):
        if s[j] == quote:
            if j + 1 < len(s) and s[j + 1] == quote:
                j += 2
                continue
            return j + 1
        j += 1
    return j


def _split(raw: str) -> list[str]:
    """macropro `parseArgs`: top-level commas, outside strings; trimmed."""
    raw = raw.strip()
    if not raw:
        return []
    args, depth, begin, i = [], 0, 0, 0
    while i < len(raw):
        c = raw[i]
        if c in "'\"":
            i = _string_end(raw, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(raw[begin:i].strip())
            begin = i + 1
        i += 1
    args.append(raw[begin:].strip())
    return args


def _strip_comments(q: str) -> str:
    """`--` and `/* */` comments blanked (a macro inside one is never expanded)."""
    out, i = [], 0
    while i < len(q):
        if q[i] in "'\"":
            j = _string_end(q, i)
            out.append(q[i:j])
            i = j
        elif q.startswith("--", i):
            j = min((k for k in (q.find("\n", i), q.find("\r", i)) if k >= 0), default=len(q))
            out.append(" " * (j - i))
            i = j
        elif q.startswith("/*", i):
            j = q.find("*/", i + 2)
            j = len(q) if j < 0 else j + 2
            out.append(" " * (j - i))
            i = j
        else:
            out.append(q[i])
            i += 1
    return "".join(out)


def _macros(start: datetime, end: datetime, interval: timedelta) -> dict[str, tuple[int, str]]:
    """name -> (arguments it needs, -1: any, and its template over `{0}`, `{1}`)."""
    f, t = int(start.timestamp() // 1), int(end.timestamp() // 1)
    fms, tms = int(start.timestamp() * 1000 // 1), int(end.timestamp() * 1000 // 1)
    seconds = int(max(interval.total_seconds(), 1))
    ms = int(max(interval / timedelta(milliseconds=1), 1) // 1)
    d0 = datetime.fromtimestamp(f, UTC).strftime("%Y-%m-%d")
    d1 = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")
    between = "{0} >= %s AND {0} <= %s"
    return {
        "timeFilter": (1, between % (f"toDateTime({f})", f"toDateTime({t})")),
        "timeFilter_ms": (1, between % (f"fromUnixTimestamp64Milli({fms})",
                                        f"fromUnixTimestamp64Milli({tms})")),
        "dateFilter": (1, between % (f"toDate('{d0}')", f"toDate('{d1}')")),
        "fromTime": (-1, f"toDateTime({f})"), "toTime": (-1, f"toDateTime({t})"),
        "fromTime_ms": (-1, f"fromUnixTimestamp64Milli({fms})"),
        "toTime_ms": (-1, f"fromUnixTimestamp64Milli({tms})"),
        "timeInterval": (1, f"toStartOfInterval(toDateTime({{0}}), INTERVAL {seconds} second)"),
        "timeInterval_ms": (1, f"toStartOfInterval(toDateTime64({{0}}, 3), "
                               f"INTERVAL {ms} millisecond)"),
        "interval_s": (-1, str(seconds)),
        "interval_ms": (-1, str(int(interval / timedelta(milliseconds=1)))),
        "timeFrom": (1, f"{{0}} >= toDateTime({f})"), "timeTo": (1, f"{{0}} <= toDateTime({t})"),
    }


MACROS = {*_macros(datetime(2000, 1, 1, tzinfo=UTC), datetime(2000, 1, 1, tzinfo=UTC),
                   timedelta(seconds=1)), "conditionalAll"}
"""Every `$__name` the dashboards may use: the backend's (those `macros` expands) and the
frontend's `$__conditionalAll`."""


def macros(query: str, start: datetime, end: datetime, interval: timedelta) -> str:
    """`macros.Interpolate` (backend): comments stripped, then each known macro expanded."""
    table = _macros(start, end, interval)
    text = _strip_comments(query)
    for name in sorted(table, key=lambda n: (-len(n), n)):
        token = "$__" + name
        need, template = table[name]
        out, rest = [], text
        while (at := rest.find(token)) != -1:
            after = at + len(token)
            if after < len(rest) and (rest[after].isalnum() or rest[after] == "_"):
                out.append(rest[:after])
                rest = rest[after:]
                continue
            out.append(rest[:at])
            rest = rest[after:]
            raw = ""
            if rest.startswith("(") and (close := _closing(rest)) >= 0:
                raw, rest = rest[1:close], rest[close + 1:]
            args = _split(raw)
            if need >= 0 and len(args) != need:
                raise MacroError(f"{token} expected {need} argument(s), received {len(args)}")
            out.append(template.format(*args))
        text = "".join(out) + rest
    return text


def expand(sql: str, values: Values, start: datetime, end: datetime,
           interval_s: float = 60) -> str:
    """The SQL `grafana-clickhouse-datasource` sends for this target with these variables,
    time range and interval."""
    text = variables(conditional_all(sql, values), values, start, end)
    return macros(text, start, end, timedelta(seconds=interval_s))
