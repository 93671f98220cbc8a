"""Credentials never reach a log: every log record, from our loggers or a library's (Faust,
aiokafka, aiohttp), is redacted when it is made, its message and its traceback text, by the
same patterns as storage (`ingest.redact`). A library that logs the message it was handling
when it failed (an agent crash printing the event) cannot print a token that way."""

from __future__ import annotations

import logging
from typing import Any

_installed = False


def redact_log_records() -> None:
    """Install the redacting record factory once per process."""
    global _installed
    if _installed:
        return
    from ingest.redact import redact_text

    previous = logging.getLogRecordFactory()
    formatter = logging.Formatter()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed format string: leave it to the handler to report
            return record
        clean = redact_text(message)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text(formatter.formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
