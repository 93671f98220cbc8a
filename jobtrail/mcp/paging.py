"""Pages, citations and links: what every MCP answer carries.

A cursor is opaque to the agent: the offset of the next item and a digest of the question it
belongs to (the tool and its arguments other than cursor and limit), so a cursor replayed
with other arguments is refused naming `cursor`, never answered with another question's
page. Offsets are over the answer's order (time, then id), which is stable on a store that
only grows at the end.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from jobtrail.mcp.refusal import Refusal


def _digest(tool: str, args: dict[str, Any]) -> str:
    asked = {k: v for k, v in sorted(args.items()) if k not in ("cursor", "limit")}
    text = json.dumps([tool, asked], default=str, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cursor(tool: str, args: dict[str, Any], offset: int) -> str:
    raw = json.dumps({"q": _digest(tool, args), "o": offset}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def offset(tool: str, args: dict[str, Any]) -> int:
    """The offset a call's `cursor` names (0 without one)."""
    given = str(args.get("cursor") or "")
    if not given:
        return 0
    try:
        data = json.loads(base64.urlsafe_b64decode(given + "=" * (-len(given) % 4)))
        at, digest = int(data["o"]), str(data["q"])
    except (ValueError, KeyError, TypeError):
        raise Refusal("cursor", "not a cursor this server gave (pass next_cursor as it "
                                "came)") from None
    if digest != _digest(tool, args) or at < 0:
        raise Refusal("cursor", "it belongs to another question: call again with the same "
                                "arguments as the answer that gave it")
    return at


def page(tool: str, args: dict[str, Any], items: Sequence[Any], total: int | None = None,
         ) -> tuple[list[Any], dict[str, Any]]:
    """The page of `items` (already the whole ordered answer, or `total` of it when the
    items were read from the offset on) and its paging block."""
    start = offset(tool, args)
    limit = int(args.get("limit") or 100)
    whole = total is None
    chunk = list(items[start:start + limit] if whole else items[:limit])
    count = len(items) if whole else int(total or 0)
    after = start + len(chunk)
    more = after < count if whole else len(items) > limit
    return chunk, {"offset": start, "returned": len(chunk),
                   **({"total": count} if whole else {}),
                   "next_cursor": cursor(tool, args, after) if more else None}


def cites(event_ids: Iterable[str] = (), log: dict[str, Iterable[int]] | None = None,
          ) -> dict[str, Any]:
    """The event ids and incident-log sequence numbers an answer rests on."""
    ids = sorted({e for e in event_ids if e})
    seqs = {k: sorted(set(v)) for k, v in (log or {}).items()}
    return {"event_ids": ids, "incident_log": [{"incident_id": k, "seqs": v}
                                               for k, v in sorted(seqs.items()) if v]}


class Links:
    """Where an agent's claim can be checked: the Grafana boards and the HTTP API."""

    def __init__(self, grafana: str, api: str) -> None:
        self.grafana, self.api = grafana.rstrip("/"), api.rstrip("/")

    def job(self, project: str, job_id: str, attempt: int | None = None,
            start: datetime | None = None, end: datetime | None = None) -> dict[str, str]:
        board = {"var-project": project, "var-job": job_id,
                 "var-attempt": str(attempt) if attempt is not None else "all"}
        if start is not None and end is not None:
            board |= {"from": str(int(start.timestamp() * 1000)),
                      "to": str(int(end.timestamp() * 1000))}
        api = {"project": project, **({"attempt": str(attempt)} if attempt is not None
                                      else {})}
        return {"dashboard": f"{self.grafana}/d/jobtrail-job?{urlencode(board)}",
                "api": f"{self.api}/v1/jobs/{quote(job_id, safe='')}/timeline?"
                       f"{urlencode(api)}"}

    def incident(self, incident_id: str) -> dict[str, str]:
        return {"dashboard": f"{self.grafana}/d/jobtrail-incident?"
                             f"{urlencode({'var-incident': incident_id})}",
                "api": f"{self.api}/v1/incidents/{quote(incident_id, safe='')}"}

    def entity(self, name: str, projects: Sequence[str]) -> dict[str, str]:
        asked = [("project", p) for p in projects]
        board = [*(("var-project", p) for p in projects), ("var-entity", name)]
        return {"dashboard": f"{self.grafana}/d/jobtrail-entity?{urlencode(board)}",
                "api": f"{self.api}/v1/entities/{quote(name, safe='')}/timeline?"
                       f"{urlencode(asked)}"}

    def where(self, query: dict[str, str], projects: Sequence[str]) -> dict[str, str]:
        return {"api": f"{self.api}/v1/where?"
                       f"{urlencode([*query.items(), *(('project', p) for p in projects)])}"}
