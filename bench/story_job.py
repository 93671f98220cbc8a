"""One training job's attempt as a story tells it (part of the story generator,
`bench/story_gen.py`, which draws the jobs, their failures and restarts): the job's shape
(nodes, pace, checkpoint interval), an attempt's submission and start in slurmctld, its steps
and checkpoint saves and restores in the training log, and its completion.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from bench.story_model import (
    CLUSTERS,
    PROJECT,
    Run,
    Save,
    Story,
    hostlist,
    node,
    slurmctld,
    train,
)

MOUNTS = ["lustre-scratch:/scratch", "nfs-home:/home"]


class _Job:
    """A training job's shape: its first nodes, pace and checkpoint interval."""

    def __init__(self, rng: random.Random, job: str, nodes: list[int], start: datetime,
                 cluster: str = CLUSTERS[0]) -> None:
        self.job, self.nodes, self.start, self.cluster = job, nodes, start, cluster
        self.step_every = timedelta(seconds=rng.choice((180, 240, 300)))
        self.ckpt_every = rng.choice((50, 100))
        self.path = f"/ckpt/{PROJECT}/run-{job}"


def _start(story: Story, job: _Job, run: Run, submit: bool) -> None:
    c = run.cluster
    if submit:
        story.add("slurmctld", "job.submitted", run.submitted, c, job_id=run.job,
                  attempt=run.attempt, attributes={"gpus": run.gpus, "mounts": MOUNTS,
                                                   "queue": "gpu"})
        slurmctld(story, c, run.submitted, f"_slurm_rpc_submit_batch_job: JobId={run.job} "
                  "InitPrio=4294901759 usec=355")
    story.add("slurmctld", "job.started", run.start, c, job_id=run.job, attempt=run.attempt,
              attributes={"nodes": [node(n) for n in run.nodes], "gpus": run.gpus,
                          "mounts": MOUNTS})
    slurmctld(story, c, run.start, f"sched: Allocate JobId={run.job} NodeList="
              f"{hostlist(run.nodes)} #CPUs={128 * len(run.nodes)} Partition=gpu")
    story.runs.append(run)


def _progress(story: Story, job: _Job, run: Run, until: datetime) -> None:
    """Progress of `run` from its start (after restoring its checkpoint) to `until`: its
    first step 150 s after its start; a save under way at `until` never finishes."""
    c, head = run.cluster, run.nodes[0]
    job_fields = {"job_id": run.job, "attempt": run.attempt}
    at = run.start + timedelta(seconds=60)
    if run.restore_failed is not None:
        train(story, run, head, at - timedelta(seconds=5), f"loading checkpoint from "
              f"{job.path} at iteration {run.restore_failed}")
        story.add("training", "checkpoint.failed", at, c, **job_fields, attributes={
            "step": run.restore_failed, "path": job.path, "operation": "restore",
            "reason": "PytorchStreamReader failed reading zip archive"})
        train(story, run, head, at, "RuntimeError: PytorchStreamReader failed reading zip "
              "archive: failed finding central directory")
    if run.restored is not None:
        at = run.start + timedelta(seconds=90)
        train(story, run, head, at - timedelta(seconds=5), f"loading checkpoint from "
              f"{job.path} at iteration {run.restored}")
        story.add("training", "checkpoint.restored", at, c, **job_fields,
                  attributes={"step": run.restored, "path": job.path})
        train(story, run, head, at, f"successfully loaded checkpoint from {job.path} "
              f"[ t 0, p 0 ] at iteration {run.restored}")
    at = run.start + timedelta(seconds=150)
    step = run.restored or 0
    for _ in range(600):  # bounded: an attempt is hours
        if at >= until:
            break
        step += 10
        run.resumed = run.resumed or at
        run.steps.append((at, step))
        story.add("training", "job.step", at, c, entity="rank-0", **job_fields,
                  attributes={"step": step})
        train(story, run, head, at, f"iteration {step:8d}/  500000 | consumed samples: "
              f"{512 * step:12d} | elapsed time per iteration (ms): "
              f"{job.step_every.total_seconds() * 100:.1f} | learning rate: 1.500000E-04 | "
              "global batch size:   512 | lm loss: 2.345678E+00 | loss scale: 65536.0 |")
        if step % job.ckpt_every == 0:
            begun, done = at + timedelta(seconds=2), at + timedelta(seconds=7)
            if begun >= until:
                break
            finished = None if done >= until else done
            run.saves.append(Save(step, begun, finished))
            story.add("training", "checkpoint.started", begun, c, **job_fields,
                      attributes={"step": step, "path": job.path})
            train(story, run, head, begun, f"saving checkpoint at iteration {step:8d} to "
                  f"{job.path}")
            if finished:
                story.add("training", "checkpoint.saved", done, c, **job_fields,
                          attributes={"step": step, "path": job.path})
                train(story, run, head, done, f"successfully saved checkpoint at iteration "
                      f"{step:8d} to {job.path}")
        at += job.step_every


def _complete(story: Story, run: Run, at: datetime) -> None:
    run.end, run.outcome = at, "completed"
    story.add("slurmctld", "job.completed", at, run.cluster, job_id=run.job,
              attempt=run.attempt, attributes={"exit_code": 0})
    slurmctld(story, run.cluster, at, f"_job_complete: JobId={run.job} WEXITSTATUS 0")
    slurmctld(story, run.cluster, at + timedelta(milliseconds=1),
              f"_job_complete: JobId={run.job} done")
