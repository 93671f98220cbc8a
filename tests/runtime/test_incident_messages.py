"""The worker publishes an incident's events of one batch as JSON lines in one message, split
when they would pass the producer's 1 MB limit (a batch of revisions once made a 1.08 MB
message the broker refused, and the worker exited without committing, again and again)."""

from __future__ import annotations

from jobtrail.runtime.faust_app import MESSAGE_BYTES, message_chunks


def test_lines_are_split_into_messages_under_the_limit_in_order() -> None:
    lines = [f'{{"seq": {i}, "pad": "{"x" * 17_000}"}}'.encode() for i in range(70)]
    messages = message_chunks(lines)
    assert len(messages) > 1
    assert all(len(m) <= MESSAGE_BYTES for m in messages)
    assert [line for m in messages for line in m.split(b"\n")] == lines


def test_a_line_over_the_limit_goes_alone_and_small_batches_stay_one_message() -> None:
    assert message_chunks([b"a", b"b"]) == [b"a\nb"]
    big = b"y" * 40
    assert message_chunks([b"a", big, b"b"], limit=16) == [b"a", big, b"b"]
    assert message_chunks([]) == []
