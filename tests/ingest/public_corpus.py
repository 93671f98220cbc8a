"""The public corpus of issue 30 (tests/ingest/fixtures/public/SOURCES.md), read the way a
person pastes it: each file through its explicit adapter and through `--format auto`, with
what became of its lines (stored in an event, dead-lettered, skipped).

`python -m tests.ingest.public_corpus` prints the per-family table the issue asks for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ingest.adapters import Context, registry, run
from schemas.dead_letters import DeadLetter
from schemas.events import Event

PUBLIC = Path(__file__).parent / "fixtures" / "public"
READ_AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
_ROW = re.compile(r"^\| `(?P<file>[^`]+)` \| (?P<format>[\w-]+) \|(?P<source>.*)$")


@dataclass(frozen=True)
class Sample:
    file: str
    format: str
    quiet: bool = False
    """The right reading is no event and no dead letter."""

    @property
    def family(self) -> str:
        return self.file.split("/", 1)[0]

    @property
    def path(self) -> Path:
        return PUBLIC / self.file


def samples() -> list[Sample]:
    """Every row of SOURCES.md (file, explicit format)."""
    out = []
    for line in (PUBLIC / "SOURCES.md").read_text().splitlines():
        if m := _ROW.match(line):
            out.append(Sample(m["file"], m["format"], "no event expected" in m["source"]))
    return out


def context(name: str) -> Context:
    return Context(producer="public", observed_at=READ_AT, cluster="c", project="llm",
                   job_id="job-1", attempt=1, node="gpu-node-1", origin=name)


@dataclass
class Outcome:
    events: list[Event]
    letters: list[DeadLetter]
    lines: int
    stored: int
    dead: int
    quiet: bool = False

    @property
    def skipped(self) -> int:
        return self.lines - self.stored - self.dead

    @property
    def understood(self) -> bool:
        """Something stored, and nothing dead-lettered as a whole payload (for a file whose
        right reading is nothing: nothing stored, nothing dead-lettered)."""
        if self.quiet:
            return not self.events and not self.letters
        return bool(self.events) and not any(d.field in ("", "format", "header")
                                             for d in self.letters)


def _pieces(text: str) -> set[str]:
    return {p.strip() for p in re.split(r"[\r\n]|\^M", text) if p.strip()}


def read(sample: Sample, fmt: str | None = None) -> Outcome:
    text = sample.path.read_bytes().decode("utf-8", errors="replace")  # as `ingest` reads
    out = run(registry()[fmt or sample.format], text, context(sample.file))
    events = [e for e in out if isinstance(e, Event)]
    letters = [d for d in out if isinstance(d, DeadLetter)]
    stored_text: set[str] = set()
    for e in events:
        stored_text |= _pieces(str(e.attributes.get("raw") or "")) | _pieces(e.message or "")
    dead_text: set[str] = set()
    for d in letters:
        dead_text |= _pieces(d.payload if isinstance(d.payload, str) else str(d.payload))
    lines = stored = dead = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        lines += 1
        parts = _pieces(line)
        if parts & stored_text or any(p in s for p in parts for s in stored_text if len(p) > 8):
            stored += 1
        elif parts & dead_text or any(p in s for p in parts for s in dead_text if len(p) > 8):
            dead += 1
    return Outcome(events, letters, lines, stored, dead, sample.quiet)


def table() -> str:
    rows: dict[str, list[int]] = {}
    for sample in samples():
        explicit, auto = read(sample), read(sample, "auto")
        r = rows.setdefault(sample.family, [0] * 10)
        r[0] += 1
        r[1] += explicit.understood
        r[2] += auto.understood
        r[3] += explicit.lines
        r[4] += explicit.stored
        r[5] += explicit.dead
        r[6] += explicit.skipped
        r[7] += auto.stored
        r[8] += len(explicit.events)
        r[9] += len(auto.events)
    head = ("| family | files | understood explicit / auto | lines | stored | dead-lettered | "
            "skipped | stored by auto | events explicit / auto |\n|---|---|---|---|---|---|---|"
            "---|---|")
    body = [f"| {fam} | {r[0]} | {r[1]} / {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]} | {r[7]} "
            f"| {r[8]} / {r[9]} |" for fam, r in rows.items()]
    return "\n".join([head, *body])


if __name__ == "__main__":
    print(table())
