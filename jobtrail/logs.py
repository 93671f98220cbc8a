"""Credentials never reach a log: every log record, from our loggers or a library's (Faust,
aiokafka, aiohttp), is redacted by the same patterns as storage (`ingest.redact`): its message
and its traceback text. A library that logs the message it was handling when it failed (an
agent crash printing the event) cannot print a token that way.

Redaction happens when a handler formats the record, not when the record is made: libraries
create many records that no handler emits (Faust made a debug record per message it sent),
and redacting those cost the worker half its time. Whatever reads the text goes through
`getMessage()` or `exc_text`, and both come out redacted.
"""

from __future__ import annotations

import logging
from typing import Any

_installed = False


class _Redacting:
    """Mixed into a record's class: its message and traceback text are redacted when read."""

    _exc_text: str | None = None

    def getMessage(self) -> str:
        from ingest.redact import redact_text

        return redact_text(super().getMessage())  # type: ignore[misc]

    @property
    def exc_text(self) -> str | None:
        return self._exc_text

    @exc_text.setter
    def exc_text(self, value: str | None) -> None:
        from ingest.redact import redact_text

        # the formatter caches the formatted traceback here: it is stored redacted
        self._exc_text = redact_text(value) if value else value


def redact_log_records() -> None:
    """Install the redacting record factory once per process."""
    global _installed
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    classes: dict[type, type] = {}

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        cls = type(record)
        redacting = classes.get(cls)
        if redacting is None:  # a record class of another factory keeps its behaviour
            redacting = classes[cls] = type(f"Redacted{cls.__name__}", (_Redacting, cls), {})
        record.__class__ = redacting
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
