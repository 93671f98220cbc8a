"""Where a collector's events go, each durable before `submit` returns.

- `RuntimeSink`: the runtime `jobtrail.app.open_runtime` picks: the embedded home (events
  processed at once) or Kafka (`JOBTRAIL_KAFKA`; records signed with `JOBTRAIL_WIRE_KEY` like
  every producer, so workers trust ingest's validation);
- `HttpSink`: `POST /v1/events` of a running `jobtrail serve` with a bearer token (the token
  needs the projects it writes and `@infra` for node events); the answer is the ack.
Dead letters (a record no adapter rule accepted) go to the runtime's dead-letter path; over
HTTP they are logged, since the server re-validates and dead-letters on its side.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Sequence
from typing import Any

from ingest.canonical import Decoded
from schemas.events import Event

log = logging.getLogger("jobtrail.collect")


class RuntimeSink:
    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    def submit(self, records: Sequence[Decoded]) -> int:
        count = int(self.runtime.submit(list(records)))
        self.runtime.drain()
        return count


class HttpSink:
    def __init__(self, url: str, token: str = "", *, timeout_s: float = 30) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{url!r}: the ingest URL must be http:// or https://")
        self.url = url.rstrip("/") + "/v1/events"
        self.token = token
        self.timeout_s = timeout_s

    def submit(self, records: Sequence[Decoded]) -> int:
        events = [r for r in records if isinstance(r, Event)]
        for letter in (r for r in records if not isinstance(r, Event)):
            log.warning("not sent (dead letter): %s", letter)
        if not events:
            return 0
        body = ("\n".join(e.model_dump_json(exclude={"observed_at"}) for e in events)
                + "\n").encode()
        headers = {"Content-Type": "application/x-ndjson",
                   "X-Jobtrail-Producer": events[0].producer}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url, body, headers,  # noqa: S310 (http only)
                                         method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:  # noqa: S310
            reply = json.loads(answer.read() or b"{}")
        return int(reply.get("accepted", 0))
