"""The blameless check: human-written sections that name people or blame them.

A warning, never a block. It flags the names of the people in the incident's log (actors,
the commander, the postmortem's authors and reviewers), `@handles`, and phrases that put the
failure on a person ("human error", "should have", "careless", "fault of", ...).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from processors.postmortem.state import Postmortem

PHRASES = ("human error", "should have", "shouldn't have", "should not have", "careless",
           "negligen", "fault of", "'s fault", "blame", "incompeten", "forgot to",
           "failed to notice", "didn't bother", "sloppy", "stupid")
_HANDLE = re.compile(r"(?<![\w.])@[A-Za-z][\w.-]{1,40}")


@dataclass(frozen=True)
class Warning:
    section: str
    found: str
    why: str


def warnings(pm: Postmortem, people: Iterable[str]) -> list[Warning]:
    names = sorted({p for p in people if len(p) >= 3}, key=str.lower)
    out: list[Warning] = []
    for section in sorted(pm.sections.values(), key=lambda s: s.name):
        if section.provenance != "human":
            continue
        lower = section.text.lower()
        for phrase in PHRASES:
            if phrase in lower:
                out.append(Warning(section.name, phrase, "puts the failure on a person: "
                                   "describe the conditions that made it possible"))
        for name in names:
            if re.search(rf"(?<!\w){re.escape(name.lower())}(?!\w)", lower):
                out.append(Warning(section.name, name, "names a person: say the role or "
                                   "the system instead"))
        for handle in sorted(set(_HANDLE.findall(section.text))):
            out.append(Warning(section.name, handle, "names a person: say the role or the "
                               "system instead"))
    return out
