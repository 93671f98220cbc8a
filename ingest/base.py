"""What every source adapter shares: the shipper's `Context`, a `Reject` for the part it did
not understand, the `Adapter` record the registry lists, and the helpers adapters use (raw
evidence, line times, mapping fill, a JSON object body). Adapters import this module, never
the registry (`ingest.adapters`), so the registry can import every adapter without a circle.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ingest.canonical import ParseError, loads
from ingest.redact import clip

RAW_LIMIT = 4096
"""How much of a payload a record keeps as its raw evidence."""
MAX_LINE = 16 * 1024
"""The longest line a line adapter reads (characters); the rest of a longer line is
dead-lettered naming the cap. Real log lines are far shorter; the cap bounds what every
pattern of every adapter is run over."""


@dataclass(frozen=True)
class Context:
    """What the shipper knows and the payload may not say (job, node, cluster)."""

    producer: str
    observed_at: datetime
    cluster: str = "default"
    project: str = ""
    job_id: str = ""
    attempt: int | None = None
    node: str = ""
    origin: str = "input"
    boot_time: datetime | None = None
    """When the machine booted: places seconds-since-boot prefixes (raw dmesg, /dev/kmsg)."""
    tz: str = "UTC"
    """The zone of local times in lines (dmesg -T, syslog, glog)."""
    year: int | None = None
    """The year of lines that do not say it (syslog, glog); default: inferred."""
    reference: datetime | None = None
    """A full date the payload itself states (`timestamps.stated_date`): a year-less line
    takes the year nearest it, not the year the paste was read in."""
    kind: str = ""
    """What a Kubernetes fragment without `kind` is (`PyTorchJob`, `Job`, ...)."""


@dataclass(frozen=True)
class Reject:
    field: str
    reason: str
    payload: str
    ref: str = ""


@dataclass
class Adapter:
    name: str
    parse: Callable[[str, Context], list[dict[str, Any] | Reject]]
    doc: str = ""
    line_oriented: bool = False
    formats: list[str] = field(default_factory=list)
    max_line: int = MAX_LINE
    """Longer lines are cut here (see `cap_lines`); line adapters only."""
    healthy: Callable[[str], bool] | None = None
    """Whether the text holds lines this adapter knows to say nothing is wrong (EDAC's
    set-up lines, a health check that passed): `auto` then reads no event from them
    instead of refusing them as a format it does not know."""


def raw_evidence(payload: Any) -> str:
    """The original payload as evidence: redacted, truncated."""
    text = payload if isinstance(payload, str) else json.dumps(payload, sort_keys=True,
                                                               default=str)
    return clip(text, RAW_LIMIT)


JSON_DOCUMENT = re.compile(r"\A\s*+(?:\{\s*\"|\[\s*[{\]])")


def is_json_document(text: str) -> bool:
    """Whether `text` is one JSON document (sinfo --json, a webhook pasted into auto): a
    document is not lines, so no line cap applies to it."""
    if not JSON_DOCUMENT.match(text):
        return False
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def cap_lines(text: str, cap: int, adapter: str, origin: str = "") -> tuple[str, list[Reject]]:
    """`text` with every line longer than `cap` characters cut at the cap, and one Reject per
    cut line holding the rest (so nothing is dropped silently and no pattern ever runs over
    more than `cap` characters of a line)."""
    if len(text) <= cap:
        return text, []
    lines = text.splitlines(keepends=True)
    if all(len(line) <= cap + 2 for line in lines):
        return text, []
    rejects: list[Reject] = []
    for number, line in enumerate(lines, start=1):
        body = line.rstrip("\r\n")
        if len(body) <= cap:
            continue
        rejects.append(Reject(
            "line", f"line {number} is {len(body)} characters, over the {cap}-character line "
            f"cap of {adapter}: the {len(body) - cap} characters after the cap are not read",
            body[cap:], ref=f"{origin}#line{number}"))
        lines[number - 1] = body[:cap] + line[len(body):]
    return "".join(lines), rejects


def line_time(line: str, ctx: Context) -> tuple[str, str, str]:
    """(time, host, time_source) from a log line's prefix (`ingest.timestamps.read`: ISO,
    dmesg -T / -x / raw, kmsg, syslog, RFC 5424, glog, epoch). Without a time in the line it
    is when the shipper observed it and `time_source` says `observed`."""
    from ingest.timestamps import read

    stamp = read(line, ctx)
    return stamp.time, stamp.host, stamp.source


_FIELD = re.compile(r"\{(\w+)\}")


def fill(template: Any, values: dict[str, str], where: str) -> Any:
    """Fill `{name}` placeholders of a mapping entry from `values` (labels, data fields).

    A missing name raises ParseError naming it; a bare `"{x}"` keeps a number numeric.
    """
    if isinstance(template, dict):
        return {k: fill(v, values, f"{where}.{k}") for k, v in template.items()}
    if not isinstance(template, str):
        return template
    missing = [name for name in _FIELD.findall(template) if name not in values]
    if missing:
        raise ParseError(missing[0], f"needed by the mapping for {where}")
    value = _FIELD.sub(lambda m: values[m.group(1)], template)
    if _FIELD.fullmatch(template) and re.fullmatch(r"-?\d+(\.\d+)?", value):
        return json.loads(value)
    return value


def json_object(text: str, what: str = "the body") -> dict[str, Any]:
    """A payload that must be one JSON object; a ParseError saying which rule it broke."""
    try:
        payload = loads(text)
    except RecursionError:
        raise ParseError("", "not JSON we accept: nested too deep to parse") from None
    except ValueError as exc:
        raise ParseError("", f"not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise ParseError("", f"{what} must be a JSON object")
    return payload
