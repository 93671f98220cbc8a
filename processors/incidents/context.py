"""What every incident concern decides from: the detector's memory (`Book`), the rules and
the topology. A plain bundle with no behaviour, so the concern modules need neither the
`Detector` that coordinates them nor each other's coordinator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from processors.incidents.book import Book
from processors.incidents.rules import Rules
from processors.topology import Topology


@dataclass(frozen=True, slots=True)
class Context:
    book: Book
    rules: Rules
    topology: Callable[[], Topology]
