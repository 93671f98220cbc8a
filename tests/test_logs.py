"""No credential in a log line, whoever logs it: the record factory redacts the message and
the traceback text of every record (a library that logs the message it failed on included)."""

from __future__ import annotations

import io
import logging

from jobtrail.logs import redact_log_records

SECRET = "sk_live_" + "LmQiq3DGe2RSBHnfTTZ8nOas"


def test_messages_arguments_and_tracebacks_are_redacted() -> None:
    redact_log_records()
    redact_log_records()  # idempotent: installed once
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    library = logging.getLogger("faust.agents.agent")  # a library's logger, not ours
    library.addHandler(handler)
    library.propagate = False
    try:
        library.error("Agent crashed on event value=%r", f'{{"message": "{SECRET}"')
        try:
            raise ValueError(f"bad record: {SECRET}")
        except ValueError:
            library.exception("while handling")
        library.warning("plain %s %d", "text", 3)
    finally:
        library.removeHandler(handler)
        library.propagate = True
    text = out.getvalue()
    assert "LmQiq3DGe2RSBHnfTTZ8nOas" not in text
    assert "Agent crashed on event value=" in text and "ValueError: bad record:" in text
    assert "plain text 3" in text  # ordinary lines are untouched


def test_records_no_handler_emits_cost_no_redaction(monkeypatch: object) -> None:
    """Libraries make records nobody emits (Faust: one debug record per message sent); those
    must not pay for redaction, which once took half the worker's time."""
    import ingest.redact

    redact_log_records()
    calls = {"n": 0}
    real = ingest.redact.redact_text

    def counting(text: str) -> str:
        calls["n"] += 1
        return real(text)

    monkeypatch.setattr(ingest.redact, "redact_text", counting)  # type: ignore[attr-defined]
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setLevel(logging.WARNING)
    chatty = logging.getLogger("faust.topics")
    chatty.setLevel(logging.DEBUG)
    chatty.addHandler(handler)
    chatty.propagate = False
    try:
        for i in range(100):
            chatty.debug("published %d: %s", i, SECRET)
        assert calls["n"] == 0 and out.getvalue() == ""
        chatty.warning("failed to publish %s", SECRET)
    finally:
        chatty.removeHandler(handler)
        chatty.propagate = True
        chatty.setLevel(logging.NOTSET)
    assert calls["n"] >= 1
    text = out.getvalue()
    assert "failed to publish" in text and "LmQiq3DGe2RSBHnfTTZ8nOas" not in text
