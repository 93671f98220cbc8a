"""The GPUs of a Slurm job, read from every part of its record that says them (issue 41,
capability 1): the count read back against what the record itself says, and the source."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ingest.base import Context
from ingest.slurm import gpus_from_job, job_records
from ingest.slurm_gpus import from_gres, from_submit_line, from_tres
from ingest.slurm_text import parse_scontrol
from ingest.slurm_tools import parse_sacct, parse_squeue

FIXTURES = Path(__file__).parent / "fixtures"
CTX = Context(producer="test", observed_at=datetime(2026, 12, 6, 2, 0, tzinfo=UTC),
              cluster="dev", project="research")


def _n(value: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": value}


def test_squeue_json_of_a_real_slurm_22_05_gives_the_allocated_gpus() -> None:
    """squeue --json (openapi/v0.0.38, the live cluster's `--gres=gpu:2` jobs): every record
    says `tres_alloc_str ...gres/gpu=2` and `tres_per_node gres:gpu:2`."""
    doc = json.loads((FIXTURES / "gpus/squeue_running_slurm_22.05.8.json").read_text())
    for job in doc["jobs"]:
        assert "gres/gpu=2" in job["tres_alloc_str"]
        assert gpus_from_job(job) == (2, "allocation:tres_alloc_str gres/gpu=2")
        if job["gres_detail"]:  # a running job's, one entry per node
            assert gpus_from_job({"gres_detail": job["gres_detail"]}) == (
                2, "allocation:gres_detail (1 node)")
        without = {k: v for k, v in job.items() if k not in ("tres_alloc_str", "gres_detail")}
        assert gpus_from_job(without) == (2, "request:tres_req_str gres/gpu=2")
        request_only = {k: v for k, v in without.items() if k != "tres_req_str"}
        assert gpus_from_job(request_only) == (2, "request:tres_per_node gres:gpu:2 x 1 node")


def test_sacct_json_of_a_real_slurm_22_05_gives_the_allocated_gpus() -> None:
    doc = json.loads((FIXTURES / "gpus/sacct_slurm_22.05.8.json").read_text())
    for job in doc["jobs"]:
        said = [t["count"] for t in job["tres"]["allocated"] if t.get("name") == "gpu"]
        assert said == [2]
        assert gpus_from_job(job) == (2, "allocation:tres.allocated")
        events = [d for d in job_records(job, 0, CTX) if isinstance(d, dict)]
        started = [e for e in events if e["type"] == "job.started"]
        for event in started:
            assert (event["attributes"]["gpus"], event["attributes"]["gpus_source"]) == \
                (2, "allocation:tres.allocated")


@pytest.mark.parametrize(("record", "want"), [
    # Slurm 24.11 squeue --json: untyped and typed counts of the same GPU (one, not two)
    ({"tres_alloc_str": "cpu=2,mem=4G,node=1,billing=2,gres/gpu=1,gres/gpu:l40s=1,"
                        "gres/tmpsize=10737418240"},
     (1, "allocation:tres_alloc_str gres/gpu=1,gres/gpu:l40s=1")),
    # only a typed count (AccountingStorageTRES=gres/gpu:h100)
    ({"tres_alloc_str": "cpu=64,gres/gpu:h100=8,node=1"},
     (8, "allocation:tres_alloc_str gres/gpu:h100=8")),
    # 23.x/24.x: one gres_detail entry per node
    ({"nodes": "gpu-[005-006]", "node_count": _n(2), "tres_per_node": "gres/gpu:a100:2",
      "gres_detail": ["gpu:a100:2(IDX:0-1)", "gpu:a100:2(IDX:2-3)"]},
     (4, "allocation:gres_detail (2 nodes)")),
    # 23.02+: tres_per_node `gres/gpu:TYPE:N`, times the nodes (the 23.11 `node_count` shape)
    ({"nodes": "", "node_count": _n(4), "tres_per_node": "gres/gpu:gpu48:1"},
     (4, "request:tres_per_node gres/gpu:gpu48:1 x 4 nodes")),
    # slurmrestd's submit form `gres/gpu=1` and a per-job count
    ({"tres_per_job": "gres/gpu:16"}, (16, "request:tres_per_job gres/gpu:16")),
    ({"tres_per_node": "gres/gpu=1", "node_count": 2},
     (2, "request:tres_per_node gres/gpu=1 x 2 nodes")),
    ({"tres_per_task": "gres/gpu:1", "tasks": _n(8)},
     (8, "request:tres_per_task gres/gpu:1 x 8 tasks")),
    # sacct --json with only the request (a job that never ran)
    ({"tres": {"allocated": [], "requested": [{"type": "gres", "name": "gpu", "count": 512},
                                              {"type": "gres", "name": "gpu:h100",
                                               "count": 512}]}},
     (512, "request:tres.requested")),
    # the 23.11 fixture: `count` beside a cpu entry
    ({"tres": {"allocated": [{"type": "cpu", "count": 256},
                             {"type": "gres", "name": "gpu", "count": 32}]}},
     (32, "allocation:tres.allocated")),
    # the submit line (sacct --json `submit_line`)
    ({"submit_line": "sbatch -N 4 --gres=gpu:8 --requeue train.sh"},
     (32, "request:--gres=gpu:8 x 4 nodes")),
])
def test_every_shape_says_its_count_and_source(record: dict[str, Any],
                                               want: tuple[int, str]) -> None:
    assert gpus_from_job(record) == want


@pytest.mark.parametrize("record", [
    {}, {"tres_alloc_str": "cpu=8,mem=64G,node=1,billing=8"}, {"gres_detail": []},
    {"tres": {"allocated": [{"type": "cpu", "count": 8}]}}, {"tres_per_node": ""},
    {"tres_per_node": "gres:gpu:8"},  # per node, but how many nodes is not said
    {"submit_line": "sbatch train.sh"},
])
def test_a_record_that_names_no_gpu_is_unknown_not_zero(record: dict[str, Any]) -> None:
    assert gpus_from_job(record) is None


def test_tres_and_gres_strings() -> None:
    assert from_tres("cpu=128,mem=2T,node=2,billing=128,gres/gpu=16") == 16
    assert from_tres("billing=1,cpu=1,gres/gpu=2,node=1") == 2
    assert from_tres("gres/gpu:3g.20gb=1") == 1
    assert from_tres("cpu=1") is None
    assert from_gres("gpu:a100:8(IDX:0-7)") == 8
    assert from_gres("gpu:2(IDX:0,2)") == 2
    assert from_gres("gres:gpu:8,gres:nic:1") == 8
    assert from_gres("gpu") == 1
    assert from_gres("gres/gpu:3g.20gb:1") == 1
    assert from_gres("nic:1") is None


@pytest.mark.parametrize(("line", "nodes", "want"), [
    ("sbatch --gres=gpu:8 -N 2 job.sh", None, (16, "request:--gres=gpu:8 x 2 nodes")),
    ("sbatch --gres gpu:a100:4 --nodes=3 job.sh", None,
     (12, "request:--gres=gpu:a100:4 x 3 nodes")),
    ("sbatch --gpus=16 job.sh", None, (16, "request:--gpus=16")),
    ("srun -G 4 python x.py", None, (4, "request:--gpus=4")),
    ("#SBATCH --gpus-per-node=8", 64, (512, "request:--gpus-per-node=8 x 64 nodes")),
    ("sbatch --ntasks=16 --gpus-per-task=1 job.sh", None,
     (16, "request:--gpus-per-task=1 x 16 tasks")),
    ("sbatch --gres=gpu:8 job.sh", None, (8, "request:--gres=gpu:8 x 1 node")),
])
def test_submit_lines(line: str, nodes: int | None, want: tuple[int, str]) -> None:
    assert from_submit_line(line, nodes) == want


def _started(drafts: list[Any]) -> dict[str, Any]:
    return next(d for d in drafts if isinstance(d, dict) and d["type"] == "job.started")


def test_scontrol_of_a_real_slurm_22_05_says_tres_and_tres_per_node() -> None:
    text = FIXTURES / "public/slurm-text/scontrol_show_job_failed_slurm_22.05.8.txt"
    attrs = _started(parse_scontrol(text.read_text(), CTX))["attributes"]
    assert "TRES=cpu=1,node=1,billing=1,gres/gpu=2" in text.read_text()
    assert (attrs["gpus"], attrs["gpus_source"]) == (2, "allocation:TRES gres/gpu=2")
    request = text.read_text().replace("   TRES=cpu=1,node=1,billing=1,gres/gpu=2\n", "")
    attrs = _started(parse_scontrol(request, CTX))["attributes"]
    assert (attrs["gpus"], attrs["gpus_source"]) == (2, "request:TresPerNode gres:gpu:2 x 1 node")


def test_scontrol_detail_node_lines_and_newer_alloc_tres() -> None:
    """`scontrol show -d job` (23.x+: `AllocTRES=`, one `Nodes= ... GRES=` line per node)."""
    text = ("JobId=77 JobName=pretrain UserId=a(1) Account=research JobState=RUNNING "
            "Reason=None Restarts=0 SubmitTime=2026-12-06T01:00:00 "
            "StartTime=2026-12-06T01:00:05 EndTime=Unknown Partition=gpu NodeList=n[1-2] "
            "NumNodes=2\n"
            "   Nodes=n1 CPU_IDs=0-63 Mem=0 GRES=gpu:h100:8(IDX:0-7)\n"
            "   Nodes=n2 CPU_IDs=0-63 Mem=0 GRES=gpu:h100:8(IDX:0-7)\n"
            "   TresPerNode=gres/gpu:h100:8\n")
    attrs = _started(parse_scontrol(text, CTX))["attributes"]
    assert (attrs["gpus"], attrs["gpus_source"]) == (16, "allocation:gres_detail (2 nodes)")
    newer = text.replace("   Nodes=n1", "   ReqTRES=cpu=128,node=2,gres/gpu=16\n"
                         "   AllocTRES=cpu=128,node=2,billing=128,gres/gpu=16\n   Nodes=n1")
    attrs = _started(parse_scontrol(newer, CTX))["attributes"]
    assert (attrs["gpus"], attrs["gpus_source"]) == (16, "allocation:AllocTRES gres/gpu=16")


def test_sacct_text_alloc_tres_and_submit_line() -> None:
    text = (FIXTURES / "public/slurm-text/sacct_parsable_slurm_22.05.8.txt").read_text()
    drafts = [d for d in parse_sacct(text, CTX) if isinstance(d, dict)
              and d["type"] == "job.started"]
    assert drafts and all("gres/gpu=2" in d["attributes"]["raw"] for d in drafts)
    assert {(d["attributes"]["gpus"], d["attributes"]["gpus_source"]) for d in drafts} == {
        (2, "allocation:AllocTRES gres/gpu=2")}
    submit = ("JobID|State|Start|End|NodeList|SubmitLine\n"
              "91|RUNNING|2026-12-06T01:00:00|Unknown|n[1-2]|sbatch -N 2 --gres=gpu:8 t.sh\n")
    attrs = _started(parse_sacct(submit, CTX))["attributes"]
    assert (attrs["gpus"], attrs["gpus_source"]) == (16, "request:--gres=gpu:8 x 2 nodes")


def test_squeue_text_tres_per_node_and_tres_alloc_columns() -> None:
    text = ("JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON) TRES_PER_NODE\n"
            "4 gpu train root R 0:20 2 n[1-2] gres:gpu:2\n")
    attrs = _started(parse_squeue(text, CTX))["attributes"]
    assert (attrs["gpus"], attrs["gpus_source"]) == (
        4, "request:tres_per_node gres:gpu:2 x 2 nodes")
    text = ("JOBID ST NODELIST TRES_ALLOC\n"
            "4 R n1 cpu=1,node=1,billing=1,gres/gpu=2\n")
    attrs = _started(parse_squeue(text, CTX))["attributes"]
    assert (attrs["gpus"], attrs["gpus_source"]) == (2, "allocation:tres_alloc_str gres/gpu=2")
