"""A tool's refusal: the field it is about and why, as the agent reads it (`field: why`)."""

from __future__ import annotations


class Refusal(Exception):
    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why
