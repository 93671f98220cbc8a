"""Checkpoints in the frameworks' own words (issue 41, capability 3): a save that started is a
checkpoint only once the framework says it finished and no error followed; a load an error
ended is a failed restore. Public samples (fixtures/public/SOURCES.md) read field by field."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ingest.adapters import Context, registry, run
from schemas.events import Event

TRAINING = Path(__file__).parent / "fixtures" / "public" / "training"
READ_AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _events(text: str) -> list[Event]:
    ctx = Context(producer="test", observed_at=READ_AT, cluster="c", project="p", job_id="j",
                  attempt=1, node="gpu-node-1", origin="test")
    return [e for e in run(registry()["training-log"], text, ctx) if isinstance(e, Event)]


def _checkpoints(text: str) -> list[tuple[str, int | None, str]]:
    return [(e.type, e.attributes.get("step"), e.time.isoformat()) for e in _events(text)
            if e.type.startswith("checkpoint.")]


DEEPSPEED = (TRAINING / "deepspeed_zero_save_ready_now.txt").read_text()
MEGATRON = (TRAINING / "megatron_deepspeed_pipeline_save.txt").read_text()


def test_deepspeed_is_ready_now_is_the_checkpoint() -> None:
    (saved,) = [e for e in _events(DEEPSPEED) if e.type.startswith("checkpoint.")]
    assert "is ready now!" in saved.attributes["raw"]
    assert (saved.type, saved.attributes["step"], saved.time.isoformat()) == (
        "checkpoint.saved", 500, "2024-10-22T20:11:28.487000+00:00")
    assert saved.attributes["path"] == "saves/Qwen2.5-0.5B-Instruct/lora/sft/checkpoint-500"


def test_a_save_cut_before_it_finished_only_started() -> None:
    """The job killed while DeepSpeed wrote the optimizer shard: `about to be saved`, no
    `is ready now!` - a save that started, at the time it started."""
    cut = DEEPSPEED.split("[2024-10-22 20:11:28,431]")[0]
    assert _checkpoints(cut) == [("checkpoint.started", 500,
                                  "2024-10-22T20:11:28.103000+00:00")]


def test_an_error_during_the_save_is_a_failed_checkpoint() -> None:
    cut = DEEPSPEED.split("[2024-10-22 20:11:28,431]")[0]
    full = cut + ("[2024-10-22 20:11:29,002] OSError: [Errno 28] No space left on device: "
                  "'saves/Qwen2.5-0.5B-Instruct/lora/sft/checkpoint-500/global_step500/"
                  "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt'\n")
    events = _events(full)
    failed = [e for e in events if e.type == "checkpoint.failed"]
    assert [(e.attributes["step"], e.attributes["operation"], e.time.isoformat())
            for e in failed] == [(500, "save", "2024-10-22T20:11:29.002000+00:00")]
    assert "No space left on device" in failed[0].attributes["reason"]
    assert not [e for e in events if e.type in ("checkpoint.saved", "checkpoint.started")]
    assert [e.attributes["error"] for e in events if e.type == "job.worker_exited"] == [
        "enospc"]


def test_an_io_error_on_a_finished_save_undoes_it() -> None:
    after = DEEPSPEED + ("[2024-10-22 20:11:30,000] OSError: [Errno 5] Input/output error: "
                         "'saves/Qwen2.5-0.5B-Instruct/lora/sft/checkpoint-500/latest'\n")
    assert _checkpoints(after) == [("checkpoint.failed", 500, "2024-10-22T20:11:30+00:00")]


def test_megatron_deepspeed_saves_once_when_every_rank_committed() -> None:
    """Four ranks commit between 07:22:31.774 and 07:22:37.720, then Megatron's untimed
    `successfully saved`: one checkpoint, whole at the last of them."""
    assert MEGATRON.count("is ready now!") == 6
    assert _checkpoints(MEGATRON) == [("checkpoint.saved", 2500,
                                       "2023-08-15T07:22:37.720000+00:00")]
    started_only = MEGATRON.split("[2023-08-15 07:22:31,774] [INFO] [torch_checkpoint_engine"
                                  ".py:33")[0]
    # Megatron's untimed `saving checkpoint` takes its timed neighbour's time
    assert _checkpoints(started_only) == [("checkpoint.started", 2500,
                                           "2023-08-15T07:22:31.767000+00:00")]


def test_a_truncated_checkpoint_is_a_failed_restore() -> None:
    """mmcv loads iter_90000.pth and torch.load fails on the truncated zip: the load is
    recorded, and its failure (operation `restore`), so the rerun did not resume from it."""
    events = _events((TRAINING / "mmcv_load_truncated_checkpoint.txt").read_text())
    assert [(e.type, e.attributes["step"], e.attributes.get("operation")) for e in events] == [
        ("checkpoint.restored", 90000, None), ("checkpoint.failed", 90000, "restore")]
    assert events[1].attributes["reason"] == "RuntimeError: PytorchStreamReader"


def test_an_error_after_the_first_step_is_not_the_load_s() -> None:
    text = ("2026-11-30T08:00:00Z Loading checkpoint: /ckpt/global_step2000/mp_rank_00_model_"
            "states.pt\n2026-11-30T08:01:00Z step=2001 loss=2.1\n"
            "2026-11-30T08:02:00Z RuntimeError: checkpoint shard missing on node 3\n")
    assert [e.type for e in _events(text) if e.type.startswith("checkpoint.")] == [
        "checkpoint.restored"]
    oom = ("2026-11-30T08:00:00Z Loading checkpoint: /ckpt/global_step2000/mp_rank_00_model_"
           "states.pt\n2026-11-30T08:00:30Z torch.OutOfMemoryError: CUDA out of memory.\n")
    assert [e.type for e in _events(oom) if e.type.startswith("checkpoint.")] == [
        "checkpoint.restored"]


def test_nemo_async_save_is_a_checkpoint_when_finalized() -> None:
    staged = ("[NeMo I 2026-11-30 08:05:00 nemo_logging:393] Global Checkpoint Save : Rank: 0 : "
              "Iteration: 1100 : Start time: 1764489900.000s : Save duration: 3.500s\n"
              "[NeMo I 2026-11-30 08:05:01 nemo_logging:393] Scheduled async checkpoint save "
              "for /ckpt/run7/step=1100.ckpt\n")
    assert _checkpoints(staged) == [("checkpoint.started", 1100, "2026-11-30T08:05:00+00:00")]
    done = staged + ("[NeMo I 2026-11-30 08:05:09 nemo_logging:393] Async checkpoint save for "
                     "step 1101 (/ckpt/run7/step=1100.ckpt) finalized successfully.\n")
    assert _checkpoints(done) == [("checkpoint.saved", 1100, "2026-11-30T08:05:09+00:00")]


def test_lightning_says_only_that_it_is_saving() -> None:
    line = ("2026-11-30T08:40:20Z Epoch 0, global step 2000: 'val_loss' reached 2.80 (best 2.80)"
            ", saving model to '/ckpt/step-2000.ckpt' as top 1\n")
    assert _checkpoints(line) == [("checkpoint.started", 2000, "2026-11-30T08:40:20+00:00")]


MEGATRON_FALLBACK = """\
[2024-05-02 10:00:01] loading checkpoint from /ckpt/gpt/run-7 at iteration 2000
[2024-05-02 10:00:06] RuntimeError: PytorchStreamReader failed reading zip archive: failed \
finding central directory
[2024-05-02 10:00:31] loading checkpoint from /ckpt/gpt/run-7 at iteration 1500
[2024-05-02 10:00:36] successfully loaded checkpoint from /ckpt/gpt/run-7 [ t 0, p 0 ] at \
iteration 1500
[2024-05-02 10:01:06]  iteration     1510/  500000 | consumed samples: 773120 | lm loss: \
2.345678E+00 |
"""


def test_megatrons_load_that_an_error_ends_is_a_failed_restore_and_the_next_one_loads() -> None:
    """Megatron-LM logs `loading checkpoint from <dir> at iteration N` when a load begins
    (megatron/checkpointing.py) and `successfully loaded ...` when it is done: the begun
    load of 2000 that a truncated shard ended is a failed restore (step, path, the error,
    at the error's time), not a restore; the fallback to 1500 is the one restore."""
    events = _events(MEGATRON_FALLBACK)
    marks = [(e.type, e.attributes.get("step"), e.attributes.get("operation"),
              e.time.isoformat()) for e in events if e.type.startswith("checkpoint.")]
    assert marks == [("checkpoint.failed", 2000, "restore", "2024-05-02T10:00:06+00:00"),
                     ("checkpoint.restored", 1500, None, "2024-05-02T10:00:36+00:00")]
    failed = next(e for e in events if e.type == "checkpoint.failed")
    assert failed.attributes["path"] == "/ckpt/gpt/run-7"
    assert "PytorchStreamReader" in failed.attributes["reason"]
    assert [e.attributes["step"] for e in events if e.type == "job.step"] == [1510]
