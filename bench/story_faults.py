"""A failure mode injected into an attempt: the cause's first signals and the job's
symptoms, each as the canonical event a site's shipper sends and as the line (or record)
the source itself writes: the kernel log (NVRM Xid, Lustre, NFS, mlx5), slurmctld, the
training output, an Alertmanager webhook, ibstat, the BMC's event log."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bench.story_model import (
    GPU_BUS,
    PROJECT,
    Run,
    Story,
    iso,
    kernel,
    node,
    port,
    slurmctld,
    train,
)
from bench.story_modes import Mode, Signal, Symptom

XID_DETAIL = {
    79: "GPU has fallen off the bus.",
    62: "Internal micro-controller halt (non-fatal)",
    61: "Internal micro-controller breakpoint/warning",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
        "at partition 1, subpartition 0.",
    64: "ECC page retirement or row remapper recording failure",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
         "(GSP_RM_CONTROL) (0x2080014b 0x5).",
    120: "GSP task exception",
}


@dataclass
class Fault:
    """Where a mode struck and what it left: the truth's entity, the first symptom."""

    mode: Mode
    run: Run
    at: datetime
    culprit: int
    gpu: int
    target: str
    xid: int = 0
    symptoms: list[datetime] = field(default_factory=list)
    signals: list[datetime] = field(default_factory=list)

    def entity(self) -> str:
        kind = self.mode.truth.entity
        if kind == "gpu":
            return f"{node(self.culprit)}/gpu{self.gpu}"
        if kind == "node":
            return node(self.culprit)
        if kind == "port":
            return port(self.culprit)
        if kind == "nic":
            return f"{node(self.culprit)}/mlx5_0"
        if kind == "target":
            return self.target
        return self.run.key


def rank_of(run: Run, n: int) -> int:
    return 8 * run.nodes.index(n)


def inject(story: Story, rng: random.Random, mode: Mode, run: Run, culprit: int,
           at: datetime, gpu: int | None = None) -> Fault:
    target = {"storage_io": f"OST{rng.randrange(16):04d}",
              "client_enospc": f"OST{rng.randrange(16):04d}",
              "storage_unavailable": "home01"}
    kinds = [s.kind for s in mode.signals]
    drawn = rng.randrange(8)
    fault = Fault(mode, run, at, culprit, drawn if gpu is None else gpu,
                  next((target[k] for k in kinds if k in target), ""))
    for sig in mode.signals:
        if rng.random() < sig.chance:
            _signal(story, rng, sig, fault)
    for sym in mode.symptoms:
        _symptom(story, rng, sym, fault)
    return fault


def _signal(story: Story, rng: random.Random, sig: Signal, f: Fault) -> None:
    at = f.at + timedelta(seconds=sig.at)
    c, n, g, run = f.run.cluster, f.culprit, f.gpu, f.run
    f.signals.append(at)
    if sig.kind == "xid":
        f.xid = rng.choice(sig.xid)
        story.add(f"dmesg:{node(n)}", "node.xid", at, c, scope="gpu", entity=f"{node(n)}/gpu{g}",
                  node=node(n), attributes={"xid": f.xid, "gpu": str(g)})
        kernel(story, c, n, at, f"NVRM: Xid (PCI:0000:{GPU_BUS[g]}:00): {f.xid}, pid="
               f"{2200 + g}, name=python, {XID_DETAIL[f.xid]}")
    elif sig.kind == "thermal":  # DCGM's temperature samples (no raw: a metrics scrape)
        for i in range(sig.count):
            story.add("dcgm", "node.thermal", at + timedelta(minutes=2 * i), c, scope="gpu",
                      entity=f"{node(n)}/gpu{g}", node=node(n),
                      attributes={"gpu": str(g), "temperature_c": 91.0 + i, "limit_c": 87.0})
    elif sig.kind == "dcgm_fail":  # DCGM's health watch; raw: dcgm-exporter's memory
        # series through deploy/prometheus/gpu-health.rules.yml (a health report has no time)
        story.add("dcgm", "node.health", at, c, scope="gpu", entity=f"{node(n)}/gpu{g}",
                  node=node(n), attributes={"gpu": str(g), "system": sig.test.lower(),
                                            "status": "failure"})
        if sig.test.lower() == "memory":
            alert(story, c, "GPURowRemapFailure", {"node": node(n), "gpu": str(g)}, at, None)
    elif sig.kind in ("port_down", "link_errors"):
        switch, p = port(n).split("/")
        if sig.kind == "port_down":
            up = at + timedelta(seconds=rng.randint(*(sig.up_after or (120, 600))))
            story.add("fabric", "network.port_down", at, c, scope="port", entity=port(n),
                      attributes={"switch": switch, "port": p})
            story.add("fabric", "network.port_up", up, c, scope="port", entity=port(n),
                      attributes={"switch": switch, "port": p})
            alert(story, c, "IBPortDown", {"switch": switch, "port": p}, at, up)
        else:
            story.add("fabric", "network.link_errors", at, c, scope="port", entity=port(n),
                      attributes={"switch": switch, "port": p, "counter": "symbol_errors",
                                  "value": 12.0})
            alert(story, c, "IBLinkErrors", {"switch": switch, "port": p}, at, None)
    elif sig.kind == "nic_down":
        up = at + timedelta(seconds=rng.randint(*(sig.up_after or (300, 900))))
        entity = f"{node(n)}/mlx5_0"
        story.add(f"ibstat:{node(n)}", "network.port_down", at, c, scope="nic", entity=entity,
                  node=node(n), attributes={"port": "mlx5_0"})
        story.add(f"ibstat:{node(n)}", "network.port_up", up, c, scope="nic", entity=entity,
                  node=node(n), attributes={"port": "mlx5_0"})
        for when, state in ((at - timedelta(seconds=2), "Active"), (at, "Down"), (up, "Active")):
            ibstat(story, c, n, when, state)
    elif sig.kind == "node_down":
        node_down(story, c, n, at)
    elif sig.kind == "power_off":
        story.add(f"bmc:{node(n)}", "node.power", at, c, scope="node", entity=node(n),
                  node=node(n), attributes={"state": "off", "cause": "power_down",
                                            "sensor": "Pwr Unit Status"})
        story.line(("ipmi", c, "", node(n)), at, f"   {0x30 + g:x} | {at:%m/%d/%Y} | "
                   f"{at:%H:%M:%S} | Power Unit Pwr Unit Status | Power off/down | Asserted")
    elif sig.kind in ("storage_io", "client_enospc"):
        enospc = sig.kind == "client_enospc"
        attrs = {"filesystem": "lustre-scratch", "target": f.target,
                 "error": "ENOSPC" if enospc else sig.error}
        if enospc:  # the job's own node, writing its checkpoint
            story.add(f"dmesg:{node(n)}", "storage.io_error", at, c, scope="target",
                      entity=f.target, node=node(n), attributes=attrs)
        else:  # the storage system's own alert
            story.add("storage", "storage.io_error", at, c, scope="target", entity=f.target,
                      attributes=attrs)
        kernel(story, c, n, at, f"LustreError: 11-0: scratch-{f.target}-osc-ffff8f0a2b4c8000: "
               f"operation ost_write to node 10.0.0.{12 + int(f.target[-2:])}@o2ib failed: "
               f"rc = {-28 if enospc else -5}")
    elif sig.kind == "storage_unavailable":
        story.add("storage", "storage.unavailable", at, c, scope="target", entity=f.target,
                  attributes={"target": f.target, "server": f"{f.target}.cluster.local"})
        kernel(story, c, n, at, f"nfs: server {f.target}.cluster.local not responding, "
               "still trying")
    elif sig.kind == "change":  # the change system's record (no raw: its own API)
        story.add("changes", "change.applied", at, c, scope="node", entity=node(n),
                  node=node(n), attributes={"kind": "firmware", "after": sig.what,
                                            "ticket": f"CHG-{4000 + story.seed % 1000}"})
    elif sig.kind == "maintenance_drain":
        drain(story, c, n, at, f"{sig.what} CHG-{4000 + story.seed % 1000}")
    elif sig.kind == "ecc_dbe":
        story.add(f"dmesg:{node(n)}", "node.ecc", at, c, scope="gpu",
                  entity=f"{node(n)}/gpu{g}", node=node(n),
                  attributes={"gpu": str(g), "kind": "dbe", "count": 1})
    _ = run


def _symptom(story: Story, rng: random.Random, sym: Symptom, f: Fault) -> None:
    run, n = f.run, f.culprit
    at = f.at + timedelta(seconds=rng.randint(*sym.at))
    f.symptoms.append(at)
    job = {"job_id": run.job, "attempt": run.attempt}
    if sym.kind == "nccl":
        ranks = run.nodes if sym.all_ranks else sorted({run.nodes[0], n})
        for i, r in enumerate(ranks):
            when = at + timedelta(milliseconds=7 * i)
            rank = rank_of(run, r)
            story.add("ranks", "comm.nccl_timeout", when, run.cluster, node=node(r), **job,
                      attributes={"rank": rank, "seq_num": 88121, "op_type": "ALLREDUCE",
                                  "timeout_ms": 600000})
            train(story, run, r, when, f"[E ProcessGroupNCCL.cpp:563] [Rank {rank}] Watchdog "
                  "caught collective operation timeout: WorkNCCL(SeqNum=88121, "
                  "OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) "
                  "ran for 600041 milliseconds before timing out.")
    elif sym.kind == "nccl_net":
        story.add("ranks", "comm.nccl_error", at, run.cluster, node=node(n), **job,
                  attributes={"rank": rank_of(run, n), "error": "NET/IB", "device": "0"})
        train(story, run, n, at, f"{node(n)}:2231:2301 [0] NCCL WARN NET/IB : Got completion "
              "from peer 10.0.0.4<38466> with error 12, opcode 129, len 0, vendor err 129 "
              "(Recv) localGid ::ffff:10.0.0.3 remoteGidsfe80::1 hca mlx5_0")
    elif sym.kind == "exit":
        messages = (sym.message,) if isinstance(sym.message, str) else sym.message
        message = rng.choice(messages)
        segv = message.startswith("Segmentation fault")
        story.add("ranks", "job.worker_exited", at, run.cluster, node=node(n), message=message,
                  **job, attributes={"rank": rank_of(run, n), "exit_code": 139 if segv else 1,
                                     **({"signal": "SIGSEGV"} if segv else {})})
        if segv:  # srun's line: no time of its own, in the job's output (slurm-%j.out, on
            # the batch host, rank 0's) after the last timed line; it names the rank's node
            train(story, run, run.nodes[0], at, f"srun: error: {node(n)}: task "
                  f"{rank_of(run, n)}: {message}", stamped=False)
        else:
            train(story, run, n, at, message)
    elif sym.kind == "oom":
        message = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
                   f"(GPU {f.gpu}; 79.15 GiB total capacity; 75.02 GiB already allocated)")
        story.add("ranks", "job.oom", at, run.cluster, node=node(n), message=message, **job,
                  attributes={"rank": rank_of(run, n), "exit_code": 1})
        train(story, run, n, at, message)
    elif sym.kind == "nan":  # progress goes on, its loss is NaN
        step = run.last_step() + 10
        run.steps.append((at, step))
        story.add("training", "job.step", at, run.cluster, entity="rank-0", **job,
                  attributes={"step": step, "loss_is_nan": True})
        train(story, run, run.nodes[0], at, f"iteration {step:8d}/  500000 | consumed samples: "
              f"{512 * step:12d} | elapsed time per iteration (ms): 1210.0 | learning rate: "
              "1.500000E-04 | global batch size:   512 | lm loss: nan | loss scale: 65536.0 |")
        f.symptoms.pop()  # a NaN loss is progress that is wrong, not yet a failure


# --- the sources' own words -------------------------------------------------------------


def alert(story: Story, cluster: str, name: str, labels: dict[str, str], at: datetime,
          resolved: datetime | None) -> None:
    """The alert as Alertmanager's webhook sends it: firing, then (if it was) resolved."""
    key = ("alertmanager", cluster, "", "")
    fingerprint = f"{story.seed:06x}{len(story.docs.get(key, [])):02x}"
    for status in ("firing", "resolved") if resolved else ("firing",):
        story.doc(key, {
            "status": status,
            "labels": {"alertname": name, "cluster": cluster, "severity": "critical",
                       **labels},
            "annotations": {"summary": f"{labels['switch']} port {labels.get('port')}: {name}"
                            if "switch" in labels else
                            f"{name} on {labels.get('node')} GPU {labels.get('gpu')}"},
            "startsAt": iso(at),
            "endsAt": iso(resolved) if resolved and status == "resolved"
            else "0001-01-01T00:00:00Z",
            "fingerprint": fingerprint})


def ibstat(story: Story, cluster: str, n: int, at: datetime, state: str) -> None:
    physical = "LinkUp" if state == "Active" else "Polling"
    rate = 400 if state == "Active" else 10
    story.line(("ibstat", cluster, "", node(n)), at, (
        f"Every 2.0s: ibstat                                  {node(n)}: "
        f"{at:%a %b %d %H:%M:%S %Y}\n\nCA 'mlx5_0'\n\tPort 1:\n\t\tState: {state}\n"
        f"\t\tPhysical state: {physical}\n\t\tRate: {rate}\n\t\tLink layer: InfiniBand\n"
        "CA 'mlx5_1'\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
        "\t\tRate: 400\n\t\tLink layer: InfiniBand"))


def node_down(story: Story, cluster: str, n: int, at: datetime) -> None:
    story.add("slurmctld", "node.not_ready", at, cluster, scope="node", entity=node(n),
              node=node(n), attributes={"reason": "not responding"})
    slurmctld(story, cluster, at, f"error: Nodes {node(n)} not responding")


def drain(story: Story, cluster: str, n: int, at: datetime, reason: str,
          xid: int | None = None) -> None:
    story.add("slurmctld", "node.drained", at, cluster, scope="node", entity=node(n),
              node=node(n), attributes={"reason": reason, **({"xid": xid} if xid else {})})
    slurmctld(story, cluster, at, f"update_node: node {node(n)} reason set to: {reason}")
    slurmctld(story, cluster, at + timedelta(milliseconds=1),
              f"update_node: node {node(n)} state set to DRAINING")


__all__ = ["PROJECT", "Fault", "alert", "drain", "inject", "node_down"]
