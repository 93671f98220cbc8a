"""The representative job a drill submits: a small CPU-only "training" loop and its launcher.

The worker logs `step=<n> loss=<x>` lines, saves a checkpoint every N steps
(`saved checkpoint to <dir>/step_<n>.json`, written atomically) and, on a restart, restores
the newest one (`Restoring checkpoint from <path>`): the wording jobtrail's training-log
adapter reads (ingest/nccl.py). Each attempt writes `train-<restart count>.log` in the run
directory, so the shipper knows the attempt of every line. The launcher plays torchrun's
agent: when the worker dies it reports `failed (exitcode: -9) local_rank: 0 (pid: N)` and asks
Slurm to requeue the job (a site's usual recovery policy for a worker failure).
"""

from __future__ import annotations

from pathlib import Path

TRAIN_PY = r'''
import json, math, os, sys, time
from datetime import datetime, timezone

run, steps, every, pace = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
ckpt = os.path.join(run, "checkpoints")
logf = open(os.path.join(run, f"train-{restarts}.log"), "a", buffering=1)
with open(os.path.join(run, f"worker-{restarts}.pid"), "w") as f:
    f.write(str(os.getpid()))


def say(text):
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    logf.write(f"{now} {text}\n")


start = 0
found = sorted(n for n in os.listdir(ckpt) if n.startswith("step_") and n.endswith(".json"))
if found:
    path = os.path.join(ckpt, found[-1])
    start = json.load(open(path))["step"]
    say(f"Restoring checkpoint from {path}")
for step in range(start + 1, steps + 1):
    time.sleep(pace)
    say(f"step={step} loss={2.0 / math.sqrt(step):.4f} step_time={pace:.2f}s")
    if step % every == 0:
        path = os.path.join(ckpt, f"step_{step:06d}.json")
        with open(path + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(path + ".tmp", path)
        say(f"saved checkpoint to {path}")
say("training finished")
'''

LAUNCH_SH = r'''#!/bin/bash
# jobtrail drill launcher: one worker; on its failure report it like torchrun and requeue.
run="$1"; shift
python3 -u "$run/train.py" "$run" "$@" &
pid=$!
wait $pid
code=$?
if [ $code -ne 0 ]; then
  [ $code -gt 128 ] && code=$((128 - code))
  now=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
  api=torch.distributed.elastic.multiprocessing.api
  echo "$now $api: [ERROR] failed (exitcode: $code) local_rank: 0 (pid: $pid)" \
    "of binary: python3" >> "$run/train-${SLURM_RESTART_COUNT:-0}.log"
  scontrol requeue "$SLURM_JOB_ID"
  sleep 60
fi
'''


def prepare(run: Path) -> Path:
    """Write the worker and the launcher into `run`; the launcher's path."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "checkpoints").mkdir(exist_ok=True)
    (run / "train.py").write_text(TRAIN_PY)
    launcher = run / "launch.sh"
    launcher.write_text(LAUNCH_SH)
    launcher.chmod(0o755)
    return launcher
