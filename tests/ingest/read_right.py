"""Issue 44, read right: what a correct reader extracts from each public sample, field by
field (`fixtures/public/expected.yaml`), and the score of what jobtrail read.

An entry with `_gap: why` is what a correct reader extracts and jobtrail does not yet: it
is counted in the figures and the field-by-field test does not fail on it.

An expected event names its `type` and the fields a person checks: `node`, `gpu`, `job`,
`time`, `time_source`, and any attribute (`step`, `reason`, `exit_code`, ...). A file whose
right reading is nothing is `[]`. Produced events are matched to expected ones by type and
the most agreeing fields; a produced event matched to none is *extra* (an invented event),
an expected one matched by none has all its fields *missing*.

`python -m tests.ingest.read_right` prints the per-family table (files read exactly right,
fields right / wrong / missing, extra events), explicit and `auto`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from schemas.events import Event
from tests.ingest.public_corpus import PUBLIC, Sample, read, samples

EXPECTED = PUBLIC / "expected.yaml"


@cache
def expected() -> dict[str, list[dict[str, Any]]]:
    loaded = yaml.safe_load(Path(EXPECTED).read_text()) or {}
    return {str(k): list(v or []) for k, v in loaded.items()}


def value(event: Event, name: str) -> Any:
    """An event's field as the expectation names it."""
    if name == "type":
        return event.type
    if name == "node":
        return event.node or None
    if name == "job":
        return event.job_id or None
    if name == "time":
        return event.time.isoformat().replace("+00:00", "Z")
    if name == "gpu":
        gpu = event.attributes.get("gpu")
        if gpu in (None, "") and event.entity and "/gpu" in event.entity:
            gpu = event.entity.rsplit("/gpu", 1)[1]
        return None if gpu in (None, "") else str(gpu)
    if name == "entity":
        return event.entity or None
    return event.attributes.get(name)


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, datetime):
        want = want.isoformat().replace("+00:00", "Z")
    if isinstance(want, float) and isinstance(got, (int, float)):
        return abs(want - got) < 1e-6
    return bool(want == got)


@dataclass
class Score:
    files: int = 0
    exact: int = 0
    right: int = 0
    wrong: int = 0
    missing: int = 0
    extra: int = 0
    wrong_fields: list[str] = field(default_factory=list)

    def add(self, other: Score) -> None:
        self.files += other.files
        self.exact += other.exact
        self.right += other.right
        self.wrong += other.wrong
        self.missing += other.missing
        self.extra += other.extra
        self.wrong_fields.extend(other.wrong_fields)


def score(wanted: list[dict[str, Any]], events: list[Event], where: str = "") -> Score:
    out = Score(files=1)
    left = list(events)
    for entry in wanted:
        gap = entry.get("_gap")
        want = {k: v for k, v in entry.items() if not k.startswith("_")}
        notes = len(out.wrong_fields)
        candidates = [e for e in left if e.type == want["type"]]
        if not candidates:
            out.missing += len(want)
            out.wrong_fields.append(f"{where}: missing {want['type']}")
            if gap:
                out.wrong_fields[-1] = f"GAP ({gap}) {out.wrong_fields[-1]}"
            continue
        best = max(candidates, key=lambda e: sum(_same(v, value(e, k)) for k, v in
                                                 want.items()))
        left.remove(best)
        for name, wanted_value in want.items():
            got = value(best, name)
            if _same(wanted_value, got):
                out.right += 1
            elif got is None:
                out.missing += 1
                out.wrong_fields.append(f"{where}: {want['type']}.{name} missing")
            else:
                out.wrong += 1
                out.wrong_fields.append(f"{where}: {want['type']}.{name} {got!r} != "
                                        f"{wanted_value!r}")
        if gap:  # a known gap, said in the file: counted, and marked so
            out.wrong_fields[notes:] = [f"GAP ({gap}) {note}" for note in
                                        out.wrong_fields[notes:]]
    out.extra = len(left)
    out.wrong_fields.extend(f"{where}: extra {e.type} {e.entity or e.job_id}" for e in left)
    out.exact = int(not (out.wrong or out.missing or out.extra))
    return out


def scored(sample: Sample, fmt: str | None = None) -> Score:
    """The file's score; a file whose right reading is nothing is read exactly right only
    when nothing of it was refused either (prose: refused whole as no known format)."""
    got = read(sample, fmt)
    where = f"{sample.file} [{fmt or 'explicit'}]"
    out = score(expected()[sample.file], got.events, where)
    refused = [d for d in got.letters if not (sample.family == "prose" and d.field == "format")]
    if not expected()[sample.file] and refused:
        out.exact = 0
        out.wrong_fields.append(f"{where}: refused ({refused[0].reason[:80]})")
    return out


def table(show: bool = False) -> str:
    rows: dict[str, tuple[Score, Score]] = {}
    notes: list[str] = []
    for sample in samples():
        if sample.file not in expected():
            continue
        explicit, auto = scored(sample), scored(sample, "auto")
        fam = rows.setdefault(sample.family, (Score(), Score()))
        fam[0].add(explicit)
        fam[1].add(auto)
        notes.extend(explicit.wrong_fields + auto.wrong_fields)
    head = ("| family | files | exact explicit / auto | fields right / wrong / missing "
            "(explicit) | extra events explicit / auto | fields right / wrong / missing "
            "(auto) |\n|---|---|---|---|---|---|")
    body = [f"| {fam} | {e.files} | {e.exact} / {a.exact} | {e.right} / {e.wrong} / "
            f"{e.missing} | {e.extra} / {a.extra} | {a.right} / {a.wrong} / {a.missing} |"
            for fam, (e, a) in sorted(rows.items())]
    total_e, total_a = Score(), Score()
    for e, a in rows.values():
        total_e.add(e)
        total_a.add(a)
    body.append(f"| all | {total_e.files} | {total_e.exact} / {total_a.exact} | "
                f"{total_e.right} / {total_e.wrong} / {total_e.missing} | {total_e.extra} / "
                f"{total_a.extra} | {total_a.right} / {total_a.wrong} / {total_a.missing} |")
    return "\n".join([head, *body, *(["", *notes] if show else [])])


if __name__ == "__main__":
    import sys

    print(table(show="-v" in sys.argv))
