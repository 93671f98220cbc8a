"""Slurm's `sinfo` text (default, `-l` and `-R`) and `sinfo --json` (part of the Slurm text
tools, `ingest/slurm_tools.py`, whose `SINFO` adapter reads with `parse_sinfo`; its squeue
reading shares `_nodes`, a row's hostlist).

Rows in a down or drained state -> `node.not_ready` / `node.drained` per node (stamped when
read, or at the time `sinfo -l` prints above its table); `sinfo -R` rows (`REASON USER
TIMESTAMP NODELIST`) -> `node.drained` with the reason at its TIMESTAMP.
"""

from __future__ import annotations

import re
from typing import Any

from ingest import slurm_paste
from ingest.base import Context, Reject, raw_evidence
from ingest.canonical import ParseError
from ingest.hostlist import HostlistError
from ingest.redact import clip
from ingest.slurm import expand_hostlist

_DOWN = ("down", "fail", "failing", "no_respond", "not_responding")
_DRAIN = ("drain", "drng", "drained", "draining")


def _sinfo_json(doc: dict[str, Any], ctx: Context) -> list[dict[str, Any] | Reject]:
    """`sinfo --json` (entries with `node.state`, `nodes.nodes` and `reason`), or the older
    node list (`nodes: [{name, state, reason, reason_changed_at}]`)."""
    from datetime import UTC, datetime

    from ingest.slurm import _number

    rows: list[tuple[list[str], list[str], str, Any]] = []
    for entry in doc.get("sinfo") or []:
        if not isinstance(entry, dict):
            continue
        state = (entry.get("node") or {}).get("state") or []
        names = (entry.get("nodes") or {}).get("nodes") or []
        reason = entry.get("reason") or {}
        rows.append(([str(x) for x in (state if isinstance(state, list) else [state])],
                     [str(n) for n in names], str(reason.get("description") or ""),
                     reason.get("time")))
    for node in doc.get("nodes") or []:
        if isinstance(node, dict) and (node.get("name") or node.get("hostname")):
            state = node.get("state") or []
            rows.append(([str(x) for x in (state if isinstance(state, list) else [state])],
                         [str(node.get("name") or node.get("hostname"))],
                         str(node.get("reason") or ""), node.get("reason_changed_at")))
    out: list[dict[str, Any] | Reject] = []
    for states, names, reason, changed in rows:
        lower = {x.lower() for x in states}
        type_ = "node.not_ready" if lower & set(_DOWN) else "node.drained" if lower & set(
            _DRAIN) else None
        if type_ is None:
            continue
        at = _number(changed)
        when, source = (datetime.fromtimestamp(at, tz=UTC).isoformat(), "line") if at \
            else (ctx.observed_at.isoformat(), "observed")
        for node in names:
            out.append({"type": type_, "time": when, "scope": "node", "entity": node,
                        "node": node, "severity": "error" if type_ == "node.not_ready"
                        else "warning", "message": clip(f"{node} {'+'.join(states)} {reason}",
                                                        500),
                        "attributes": {"reason": clip(reason or "+".join(states), 200),
                                       "state": "+".join(states), "time_source": source,
                                       "raw": raw_evidence({"node": node, "state": states,
                                                            "reason": reason})}})
    return out


def parse_sinfo(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    if text.lstrip().startswith("{"):
        from ingest.base import json_object

        return _sinfo_json(json_object(text, "sinfo --json output"), ctx)
    if not text.strip():
        raise ParseError("header", "empty sinfo output")
    reasons = slurm_paste.table(text, "sinfo", ("REASON", "NODELIST"))
    if reasons is not None and "REASON" in {c.upper() for c in reasons.columns}:
        return _sinfo_reasons(text, reasons, ctx)
    found = slurm_paste.table(text, "sinfo", ("STATE", "NODELIST"))
    if found is None or not {"STATE", "NODELIST"} <= {c.upper() for c in found.columns}:
        raise ParseError("header", "expected sinfo output with its header (... STATE "
                         "NODELIST), or sinfo -R (REASON USER TIMESTAMP NODELIST)")
    out: list[dict[str, Any] | Reject] = []
    when, source = _snapshot_time(text, ctx) or (ctx.observed_at.isoformat(), "observed")
    for number, row, cells in found.rows:
        col = {k.upper(): v for k, v in cells.items()}
        state = col["STATE"].rstrip("*~#!%$@^-+").lower()
        type_ = "node.not_ready" if state in _DOWN else "node.drained" if state in _DRAIN \
            else None
        if type_ is None:
            continue
        listed = _nodes(col["NODELIST"], row, f"{ctx.origin}:{number}", "NODELIST")
        if isinstance(listed, Reject):
            out.append(listed)
            continue
        for node in listed:
            out.append({"id": f"sinfo-{ctx.cluster}-{node}-{state}", "type": type_,
                        "time": when, "scope": "node", "entity": node,
                        "node": node, "severity": "error" if type_ == "node.not_ready"
                        else "warning", "message": clip(row.strip(), 500),
                        "attributes": {"reason": col["STATE"], "time_source": source,
                                       "partition": col.get("PARTITION"),
                                       "raw": raw_evidence(row)}})
    return out


def _sinfo_reasons(text: str, found: slurm_paste.Table,
                   ctx: Context) -> list[dict[str, Any] | Reject]:
    """`sinfo -R` (REASON USER TIMESTAMP NODELIST; REASON is free text, every other column
    one word) and `sinfo -R --Format=...` in any column order (cut where the header's words
    start)."""
    from ingest.timestamps import local_time

    columns = [c.upper() for c in found.columns]
    snapshot = _snapshot_time(text, ctx)
    rows: list[tuple[int, str, dict[str, str]]] = []
    if columns[0] == "REASON":
        rows = [(n, row, {k.upper(): v for k, v in cells.items()})
                for n, row, cells in found.rows]
    else:
        lines = slurm_paste.unwrap(text)
        header = lines[found.header_line - 1]
        starts = [m.start() for m in re.finditer(r"\S+", header)]
        for n, row, _cells in found.rows:
            words = row.split(None, len(columns) - 1)
            if columns[-1] == "REASON" and len(words) == len(columns):
                cut = words  # `sinfo -lNe`: one word a column (right-aligned), the reason last
            else:
                cut = [row[a:b].strip() for a, b in zip(starts, [*starts[1:], len(row) + 1],
                                                         strict=True)]
            rows.append((n, row, dict(zip(columns, cut, strict=True))))
    out: list[dict[str, Any] | Reject] = []
    for number, row in found.bad:
        out.append(Reject("row", "no reason or node list", raw_evidence(row),
                          f"{ctx.origin}:{number}"))
    for number, row, col in rows:
        reason = col.get("REASON", "")
        nodes = col.get("NODELIST", "")
        if not (reason and nodes):
            out.append(Reject("row", "no reason or node list", raw_evidence(row),
                              f"{ctx.origin}:{number}"))
            continue
        # `sinfo -lNe` and friends have a STATE beside the reason: a down node is not a drain,
        # and a node back in service with an old reason is no event
        state = col.get("STATE", "").rstrip("*~#!%$@^-+").lower()
        type_ = "node.drained" if not state or state in _DRAIN else \
            "node.not_ready" if state in _DOWN or col.get("STATE", "").endswith("*") else None
        if type_ is None:
            continue
        try:
            when, source = local_time(col.get("TIMESTAMP", ""), ctx), "line"
        except ValueError:
            when, source = snapshot or (ctx.observed_at.isoformat(), "observed")
        listed = _nodes(nodes, row, f"{ctx.origin}:{number}", "NODELIST")
        if isinstance(listed, Reject):
            out.append(listed)
            continue
        for node in listed:
            attrs = {"reason": clip(reason, 200), "time_source": source,
                     "user": col.get("USER", ""), "raw": raw_evidence(row)}
            if state:
                attrs["state"] = col["STATE"]
            out.append({"type": type_, "time": when, "scope": "node", "entity": node,
                        "node": node, "severity": "warning" if type_ == "node.drained" else
                        "error", "message": clip(row.strip(), 500), "attributes": attrs})
    return out


_DATE_LINE = re.compile(r"^\s*(?P<when>\w{3} \w{3} +\d{1,2} \d\d:\d\d:\d\d \d{4})\s*$")


def _snapshot_time(text: str, ctx: Context) -> tuple[str, str] | None:
    """The time `sinfo -l` prints above its table (`Thu Jun  9 22:22:36 2016`, local)."""
    from datetime import datetime

    from ingest.timestamps import local_time

    for line in text.splitlines()[:10]:
        if m := _DATE_LINE.match(line):
            try:
                stamp = datetime.strptime(" ".join(m["when"].split()), "%a %b %d %H:%M:%S %Y")
            except ValueError:
                return None
            return local_time(stamp.strftime("%Y-%m-%d %H:%M:%S"), ctx), "line"
    return None


def _nodes(text: str, row: str, ref: str, field: str = "NODELIST(REASON)") -> list[str] | Reject:
    """A row's hostlist, or the row refused naming the limit it passes."""
    try:
        return expand_hostlist(text, field=field)
    except HostlistError as exc:
        return Reject(exc.field, exc.reason, raw_evidence(row), ref)
