"""The embedded log's framing: every way an append can be torn is found and cut on open,
sequence numbers never repeat across segments and retention, and an old `log.jsonl` home
keeps its unprocessed records."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobtrail.runtime.log import EmbeddedLog, LogCorrupt


def _payloads(log: EmbeddedLog, after: int = 0) -> list[bytes]:
    return [r.payload for r in log.read(after, 10_000)]


@pytest.mark.parametrize("cut", [3, 21, 28])  # in the header, at its end, in the payload
def test_a_torn_last_frame_is_cut_and_the_next_append_is_whole(tmp_path: Path, cut: int) -> None:
    log = EmbeddedLog(tmp_path)
    log.append([("E", b'{"a": 1}'), ("E", b'{"b": 2}')])
    (segment,) = tmp_path.glob("*.seg")
    whole = segment.read_bytes()
    frame = whole[len(whole) // 2:]
    segment.write_bytes(whole + frame[:cut])  # a SIGKILL in the middle of a third append
    reopened = EmbeddedLog(tmp_path)
    assert "torn tail" in reopened.repaired and segment.stat().st_size == len(whole)
    assert reopened.append([("E", b'{"c": 3}')]) == [3]
    assert _payloads(reopened) == [b'{"a": 1}', b'{"b": 2}', b'{"c": 3}']


def test_a_checksum_mismatch_at_the_tail_is_cut(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path)
    log.append([("E", b"first"), ("E", b"second")])
    (segment,) = tmp_path.glob("*.seg")
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF  # the last payload's bytes hit the disk, garbled
    segment.write_bytes(bytes(data))
    reopened = EmbeddedLog(tmp_path)
    assert "checksum" in reopened.repaired
    assert _payloads(reopened) == [b"first"]


def test_corruption_before_the_tail_is_refused_not_skipped(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path, segment_bytes=60)
    log.append([("E", b"x" * 20)])
    log.append([("E", b"y" * 20)])  # second segment
    first = sorted(tmp_path.glob("*.seg"))[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(LogCorrupt, match="does not check out"):
        _payloads(EmbeddedLog(tmp_path, segment_bytes=60))


def test_sequence_numbers_survive_segments_and_retention(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path, segment_bytes=100)
    for i in range(10):
        log.append([("E", f"record-{i:02d}".encode() * 3)])
    assert len(list(tmp_path.glob("*.seg"))) > 3
    assert [r.seq for r in log.read(4, 3)] == [5, 6, 7]
    log.commit(8)
    assert log.retain(8) > 0
    reopened = EmbeddedLog(tmp_path, segment_bytes=100)
    assert [r.seq for r in reopened.read(8, 10)] == [9, 10]
    assert reopened.append([("E", b"next")]) == [11]
    assert not reopened.complete  # segment 1 is gone: replaying no longer rebuilds state


def test_an_old_jsonl_log_keeps_its_unprocessed_tail(tmp_path: Path) -> None:
    old = b'E{"n": 1}\nE{"n": 2}\nD{"dead": 1}\nE{"n": 3'  # the last line torn
    (tmp_path / "log.jsonl").write_bytes(old)
    (tmp_path / "committed").write_text("1 10")  # the first record was processed
    log = EmbeddedLog(tmp_path)
    assert [(r.kind, r.payload) for r in log.read(0, 10)] == [("E", b'{"n": 2}'),
                                                               ("D", b'{"dead": 1}')]
    assert not (tmp_path / "log.jsonl").exists() and not log.complete
