"""The representative job a drill submits: a small CPU-only "training" loop and its launcher.

The worker logs `step=<n> loss=<x>` lines, saves a checkpoint every N steps
(`saved checkpoint to <dir>/step_<n>.json`, written atomically) and, on a restart, restores
the newest one (`Restoring checkpoint from <path>`) and resumes at the step the file holds:
the wording jobtrail's training-log adapter reads (ingest/nccl.py). Each attempt writes
`train-<restart count>.log` in the run directory, so the shipper knows the attempt of every
line. The launcher plays torchrun's agent: when a worker dies it reports `failed (exitcode:
-9) local_rank: 0 (pid: N)` and asks Slurm to requeue the job (a site's usual recovery policy
for a worker failure); when Slurm refuses (the job cannot be requeued) the job fails.

With two ranks (`network-partition`), rank 0 and rank 1 run in network namespaces of their
own, joined by a veth pair (jobtrail/drill/network.py), and exchange one message per step, as
a collective would: a rank that hears nothing from its peer for the collective timeout logs
PyTorch's watchdog line (`[Rank r] Watchdog caught collective operation timeout:
WorkNCCL(SeqNum=<step>, OpType=ALLREDUCE, ... Timeout(ms)=T) ran for M milliseconds before
timing out.`) and exits 1, as a NCCL job does when its network is cut.
"""

from __future__ import annotations

from pathlib import Path

TRAIN_PY = r'''
import json, math, os, socket, sys, time
from datetime import datetime, timezone

run, steps, every, pace = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
rank = int(sys.argv[5]) if len(sys.argv) > 5 else 0
peer = sys.argv[6] if len(sys.argv) > 6 else ""          # "host:port" of rank 0
timeout = float(sys.argv[7]) if len(sys.argv) > 7 else 5.0
restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
ckpt = os.path.join(run, "checkpoints")
logf = open(os.path.join(run, f"train-{restarts}.log"), "a", buffering=1)
if rank == 0:
    with open(os.path.join(run, f"worker-{restarts}.pid"), "w") as f:
        f.write(str(os.getpid()))


def say(text):
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    logf.write(f"{now} {text}\n")


def timed_out(seq, began):
    ran = int((time.monotonic() - began) * 1000)
    say(f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
        f"OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={int(timeout * 1000)}) ran for "
        f"{ran} milliseconds before timing out.")
    sys.exit(1)


def lines(sock):
    buf = b""
    while True:
        while b"\n" not in buf:
            chunk = sock.recv(64)
            if not chunk:
                return
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        yield line.decode()


link = None
if peer:
    host, port = peer.rsplit(":", 1)
    if rank == 0:
        server = socket.create_server((host, int(port)), reuse_port=False)
        server.settimeout(60)
        link, _ = server.accept()
    else:
        deadline = time.monotonic() + 60
        while True:
            try:
                link = socket.create_connection((host, int(port)), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    link.settimeout(timeout)

if rank == 1:  # the peer: answers each step's message until rank 0 is done
    seq, began = 0, time.monotonic()
    try:
        for seq_text in lines(link):
            seq, began = int(seq_text), time.monotonic()
            link.sendall(f"{seq}\n".encode())
    except socket.timeout:
        timed_out(seq + 1, began)
    sys.exit(0)

start = 0
found = sorted(n for n in os.listdir(ckpt) if n.startswith("step_") and n.endswith(".json"))
if found:
    path = os.path.join(ckpt, found[-1])
    start = json.load(open(path))["step"]
    say(f"Restoring checkpoint from {path}")
replies = lines(link) if link is not None else None
for step in range(start + 1, steps + 1):
    time.sleep(pace)
    if link is not None:  # the step's collective
        began = time.monotonic()
        try:
            link.sendall(f"{step}\n".encode())
            if next(replies, None) is None:
                say(f"[Rank {rank}] peer closed the connection at step {step}")
                sys.exit(1)
        except socket.timeout:
            timed_out(step, began)
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
# jobtrail drill launcher: one worker (or two ranks in network namespaces); on a failure
# report it like torchrun and requeue (when Slurm refuses, the job fails).
run="$1"; steps="$2"; every="$3"; pace="$4"; ns0="$5"; ns1="$6"; addr="$7"; timeout="$8"
if [ -n "$ns0" ]; then
  ip netns exec "$ns0" python3 -u "$run/train.py" "$run" "$steps" "$every" "$pace" 0 \
    "$addr" "$timeout" &
  pid=$!
  ip netns exec "$ns1" python3 -u "$run/train.py" "$run" "$steps" "$every" "$pace" 1 \
    "$addr" "$timeout" &
  peer=$!
  wait $pid; code=$?
  wait $peer; peer_code=$?
  [ $code -eq 0 ] && [ $peer_code -ne 0 ] && { code=$peer_code; pid=$peer; }
else
  python3 -u "$run/train.py" "$run" "$steps" "$every" "$pace" &
  pid=$!
  wait $pid
  code=$?
fi
if [ $code -ne 0 ]; then
  [ $code -gt 128 ] && code=$((128 - code))
  now=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
  api=torch.distributed.elastic.multiprocessing.api
  echo "$now $api: [ERROR] failed (exitcode: $code) local_rank: 0 (pid: $pid)" \
    "of binary: python3" >> "$run/train-${SLURM_RESTART_COUNT:-0}.log"
  scontrol requeue "$SLURM_JOB_ID" || exit 1
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
