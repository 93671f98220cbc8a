"""Node and infrastructure logs (kernel log, mmfs.log, uploader logs, `dcgmi health -c`).

One line at a time (DCGM's table is a multi-line record), prefixes as in `line_time`. What is
recognised (docs/adapters.md has an example of each); other lines are skipped:

- `NVRM: Xid (PCI:...): 79, ...` -> `node.xid` (read by the xid adapter);
- `mlx5_core 0000:3b:00.0 ib0: Link down|up` and the newer `mlx5_5: Port: 1 Link
  ACTIVE|DOWN` -> `network.port_up|down` (scope nic; INIT/ARMED are skipped);
- mlx5 `Port module event: module 0, Cable unplugged|plugged` -> `port_down|up`, and
  `Port module event[error]: ...` -> `network.link_errors`;
- Lustre `Connection to <fs>-OST0003 (at nid) was lost` / `Connection restored to ...` ->
  `storage.unavailable` / `storage.available`;
- `LustreError: ... operation ost_write to node nid failed: rc = -28` -> `storage.io_error`
  (errno named: ENOSPC), `This client was evicted by ...` -> `storage.io_error` (evicted);
- Lustre `Request sent has timed out for slow reply: [sent S/real R] ... dl D` ->
  `storage.latency` of (D - S) s;
- `LNetError: ... Timed out RDMA with <nid>` / `Timed out tx` -> `storage.io_error` (lnet);
- `nfs: server home01.example.com not responding, ...` / `... OK` -> `storage.unavailable` /
  `storage.available`;
- GPFS (mmfs.log) `[E] ...` -> `storage.io_error`, `... expelled ...` -> `storage.unavailable`;
- S3 `An error occurred (SlowDown) when calling the PutObject operation`, `503 Slow Down` ->
  `storage.throttled` (`exhausted` when the client reached its max retries);
- a `dcgmi health -c` table: one `node.health` per GPU subsystem in Warning or Failure.

Lustre targets are named by OST/MDT (`OST0003`), NFS servers by the first label of the host
(`home01`), S3 by bucket, so the topology's `filesystems.*.targets` attribute them to a
filesystem and from there to every job that mounts it. The node is the line's host, else the
shipper's `node`; storage events also carry the shipper's job when it names one (an uploader
log inside a job).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ingest import gpu_health, host_hardware, nhc, node_health, xid
from ingest.base import Adapter, Context, Reject, line_time, raw_evidence
from ingest.redact import clip
from ingest.timestamps import local_time

_MLX_LINK = re.compile(r"mlx5_core (?P<pci>[0-9a-f:.]++) (?P<iface>\w++): (?:Port: (?P<port>\d+) )?"
                       r"Link (?P<state>up|down|ACTIVE|DOWN|INIT|ARMED|DOWN_DEFER)\b", re.I)
_MLX_STATE = {"up": "up", "active": "up", "down": "down", "down_defer": "down"}
# newer kernels put the function, line and pid before the message (mlx5_core_info)
_MLX_MODULE = re.compile(r"mlx5_core (?P<pci>[0-9a-f:.]+?):? "
                         r"(?:\w{1,64}:\d{1,6}:\(pid \d{1,9}\): )?"
                         r"Port module event(?P<err>\[error\])?"
                         r": module (?P<module>\d+), (?P<what>[^,]+)")
# patterns that start with a repeated class start where that class does (the lookbehind), so a
# long run is tried once, not once per character (tests/ingest/test_untrusted_input.py)
_LUSTRE_TARGET = re.compile(r"(?<!\w)(?P<fs>\w++)-(?P<target>(?:OST|MDT)[0-9a-f]{4})")
_LUSTRE_LOST = re.compile(r"Connection to (?P<t>\S+) \(at (?P<nid>[^)]+)\) was lost")
_LUSTRE_BACK = re.compile(r"Connection restored to (?P<t>\S+)(?: \(at (?P<nid>[^)]+)\))?")
_LUSTRE_RC = re.compile(r"operation (?P<op>\w+) to node (?P<nid>\S+) failed: rc = (?P<rc>-?\d+)")
_LUSTRE_EVICT = re.compile(r"This client was evicted by (?P<t>\S+?);")
_LUSTRE_SLOW = re.compile(r"timed out for slow reply: \[sent (?P<sent>\d+)/real \d+\].*?"
                          r"o\d+->(?P<t>\S+?)@.*? dl (?P<dl>\d+)")
_LNET = re.compile(r"LNet(?:Error)?: .*?(?:Timed out (?:RDMA with (?P<nid>[\w.:-]+@\w+)|tx(?: for "
                   r"(?P<tx>[\w.:-]+@\w+))?)|peer NI \((?P<peer>[^)]+)\) recovery failed|"
                   r"Error sending \w+ to \d+-(?P<send>[\w.:-]+@\w+))")
_LUSTRE_DEAD = re.compile(r"(?<![\w-])(?P<t>[\w-]+-(?:MDT|OST)[0-9a-f]{4}): haven't heard from "
                          r"client "
                          r"\S+ \(at (?P<nid>[^)]+)\) in (?P<s>\d+) seconds.*?evicting")
_LUSTRE_NOCONN = re.compile(r"(?<![\w-])(?P<t>[\w-]+-(?:MDT|OST)[0-9a-f]{4})(?:_UUID)?: not "
                            r"available for "
                            r"connect from (?P<nid>\S+?) \((?P<why>[^)]+)\)")
_NFS = re.compile(r"nfs: server (?P<server>\S+) (?P<state>not responding|OK)")
_GPFS_TS = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d{4})?): ")
_GPFS = re.compile(r"\[(?P<level>[EXW])\] (?P<msg>.+)")
_GPFS_FS = re.compile(r"(?:[Ff]ile system|Volume) (?P<fs>[\w-]+)")
_SLOWDOWN = re.compile(
    r"\((?:SlowDown(?:Read|Write)?|XMinioServerBusy|ServerBusy|TooManyRequests)\) when calling "
    r"the (?P<op>\w+) operation|503 Slow ?Down|<Code>(?:SlowDown\w*|XMinioServerBusy|ServerBusy)"
    r"</Code>|[Pp]lease reduce your request rate|429 Too Many Requests|rateLimitExceeded|"
    r"exceeds the rate limit|\bSlowDown(?:Read|Write)?\b")
_BUCKET = re.compile(r"(?:s3a?|gs|gcs)://(?P<bucket>[\w.-]+)|https?://(?P<vhost>[\w-]+)\.s3[.-]"
                     r"[\w.-]+|storage\.googleapis\.com/(?:storage/v1/b/|"
                     r"upload/storage/v1/b/)?(?P<gcs>[\w.-]+)|[Bb]ucket(?:Name)?[=:]? ?['\"]?"
                     r"(?P<named>[a-z0-9][\w.-]{2,62})")
_ERRNO = {-28: "ENOSPC", -5: "EIO", -110: "ETIMEDOUT", -107: "ENOTCONN", -122: "EDQUOT",
          -30: "EROFS", -11: "EAGAIN", -4: "EINTR", -19: "ENODEV"}



def _when(line: str, ctx: Context) -> tuple[str, str, str]:
    gpfs = _GPFS_TS.match(line)
    if gpfs:
        stamp = gpfs.group("ts").replace("_", "T", 1)
        return stamp, "", "line"
    return line_time(line, ctx)


def _lustre(body: str) -> dict[str, Any] | None:
    """type, scope, entity and attributes of a Lustre/LNet line, or None."""
    def target(name: str) -> dict[str, Any]:
        found = _LUSTRE_TARGET.search(name)
        if not found:
            return {"entity": name, "attributes": {"target": name}}
        return {"entity": f"{found.group('fs')}-{found.group('target')}",
                "attributes": {"target": found.group("target"), "fsname": found.group("fs")}}

    if m := _LUSTRE_LOST.search(body):
        out = {"type": "storage.unavailable", "severity": "error", **target(m.group("t"))}
        out["attributes"]["server"] = m.group("nid")
        return out
    if m := _LUSTRE_BACK.search(body):
        out = {"type": "storage.available", "severity": "info", **target(m.group("t"))}
        if m.group("nid"):
            out["attributes"]["server"] = m.group("nid")
        return out
    if m := _LUSTRE_RC.search(body):
        rc = int(m.group("rc"))
        errno = _ERRNO.get(rc, "")
        out = {"type": "storage.io_error", "severity": "error", **target(body)}
        out["attributes"].update({"error": f"{errno} (rc={rc})" if errno else f"rc={rc}",
                                  "op": m.group("op"), "server": m.group("nid")})
        return out
    if m := _LUSTRE_EVICT.search(body):
        out = {"type": "storage.io_error", "severity": "error", **target(m.group("t"))}
        out["attributes"]["error"] = "evicted"
        return out
    if m := _LUSTRE_DEAD.search(body):  # a server's log naming the client it gave up on
        out = {"type": "storage.io_error", "severity": "error", **target(m.group("t"))}
        out["attributes"].update({"error": f"client evicted after {m.group('s')} s silent",
                                  "client": m.group("nid")})
        return out
    if m := _LUSTRE_NOCONN.search(body):
        out = {"type": "storage.unavailable", "severity": "error", **target(m.group("t"))}
        out["attributes"].update({"client": m.group("nid"), "reason": m.group("why")})
        return out
    if m := _LUSTRE_SLOW.search(body):
        out = {"type": "storage.latency", "severity": "warning", **target(m.group("t"))}
        out["attributes"]["latency_ms"] = max(0, int(m.group("dl")) - int(m.group("sent"))) * 1000
        return out
    return None


def _line(line: str, ctx: Context, ref: str) -> dict[str, Any] | Reject | None:
    time, host, source = _when(line, ctx)
    node = host or ctx.node
    body = line
    record: dict[str, Any] | None = node_health.node_fault(body, node, ctx)
    if record is not None:
        pass
    elif (record := gpu_health.fabric_manager_failure(body)) is not None:
        record["entity"] = node
    elif (m := _MLX_LINK.search(body)) and (state := _MLX_STATE.get(m.group("state").lower())):
        # INIT and ARMED are steps of coming up: not a state change worth an event
        record = {"type": f"network.port_{state}", "scope": "nic",
                  "entity": f"{node}/{m.group('iface')}",
                  "severity": "error" if state == "down" else "info",
                  "attributes": {"pci": m.group("pci"), "iface": m.group("iface"),
                                 "port": int(m.group("port")) if m.group("port") else None,
                                 "state": m.group("state")}}
    elif m := _MLX_MODULE.search(body):
        what = m.group("what").strip()
        if m.group("err"):
            type_, severity = "network.link_errors", "error"
        elif "unplugged" in what.lower():
            type_, severity = "network.port_down", "error"
        elif "plugged" in what.lower():
            type_, severity = "network.port_up", "info"
        else:
            return None
        record = {"type": type_, "scope": "nic", "entity": f"{node}/module{m.group('module')}",
                  "severity": severity, "attributes": {"pci": m.group("pci"), "reason": what}}
    elif "Lustre" in body and (found := _lustre(body)):
        record = {"scope": "target", **found}
    elif m := _LNET.search(body):
        peer = m.group("nid") or m.group("tx") or m.group("peer") or m.group("send") or ""
        error = "timed out" if "Timed out" in body else "peer recovery failed" \
            if m.group("peer") else "send failed"
        record = {"type": "storage.io_error", "scope": "node", "entity": node,
                  "severity": "error", "attributes": {"layer": "lnet", "error": error,
                                                      "server": peer}}
    elif m := _NFS.search(body):
        server = m.group("server").rstrip(":")
        # the server is the entity: an address whole, a host name by its first label
        short = server if re.fullmatch(r"[\d.]+|\[?[0-9a-fA-F:]+\]?", server) \
            else server.split(".")[0]
        up = m.group("state") == "OK"
        record = {"type": "storage.available" if up else "storage.unavailable",
                  "scope": "target", "entity": short,
                  "severity": "info" if up else "error",
                  "attributes": {"target": short, "server": server}}
    elif (m := _GPFS.search(body)) and ("mmfs" in body or _GPFS_TS.match(line)):
        message = m.group("msg")
        fs = _GPFS_FS.search(message)
        expelled = "expel" in message.lower()
        if m.group("level") == "W" and not expelled:
            return None
        record = {"type": "storage.unavailable" if expelled else "storage.io_error",
                  "scope": "filesystem" if fs else "node",
                  "entity": fs.group("fs") if fs else node, "severity": "error",
                  "attributes": {"filesystem": fs.group("fs")} if fs else {"layer": "gpfs"}}
        if not expelled:
            record["attributes"]["error"] = clip(message, 200)
    elif m := _SLOWDOWN.search(body):
        named = _BUCKET.search(body)
        bucket = next((g for g in named.groups() if g), None) if named else None
        record = {"type": "storage.throttled", "scope": "target", "entity": bucket,
                  "severity": "warning",
                  "attributes": {"op": m.group("op"), "exhausted": "max retries" in body,
                                 **({"target": bucket} if bucket else {})}}
        if ctx.job_id and ctx.project:
            record.update({"project": ctx.project, "job_id": ctx.job_id})
            if ctx.attempt is not None:
                record["attempt"] = ctx.attempt
    if record is None:
        return None
    if not node:
        return Reject("node", f"{record['type']}: no host in the line and none given by the "
                      "shipper", raw_evidence(line), ref)
    record["attributes"] = {k: v for k, v in record["attributes"].items() if v is not None}
    record["attributes"].update({"time_source": source, "raw": raw_evidence(line)})
    return {**record, "time": time, "node": node, "message": line.strip()[-500:]}


def _merged_kill(kills: dict[tuple[str, int], dict[str, Any]], record: dict[str, Any]) -> bool:
    """Whether `record` is the kernel's second line of an OOM kill already read (its
    `oom-kill:constraint=...,task=python,pid=N` line and `Out of memory: Killed process N
    (python)`): then what it adds goes on the first."""
    attrs = record["attributes"]
    if attrs.get("kind") != "host" or "pid" not in attrs or "process" not in attrs:
        return False
    key = (str(record.get("node")), int(attrs["pid"]))
    held = kills.get(key)
    if held is None:
        kills[key] = record
        return False
    for name, value in attrs.items():
        held["attributes"].setdefault(name, value)
    held["attributes"]["raw"] = raw_evidence(f"{held['attributes']['raw']}\n{attrs['raw']}")
    return True


def parse(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    out: list[dict[str, Any] | Reject] = []
    if (events := gpu_health.health_events(text, ctx)) is not None:
        for event in events:
            out.append(event if event["node"] else Reject(
                "node", "a health event names no host and none was given",
                str(event["attributes"]["raw"])))
        return out
    originals = text.splitlines()
    lines = [gpu_health.localise(line) for line in originals]
    nvlink, used = gpu_health.nvlink_status(lines, ctx)
    smi, smi_used = gpu_health.nvidia_smi_q(lines, ctx)
    out.extend([*nvlink, *smi])
    used |= smi_used
    fabric: set[tuple[str, str]] = set()  # (node, minute): one Fabric Manager failure
    gone: set[tuple[str, str]] = set()  # (GPU, minute): one GPU off the bus
    kills: dict[tuple[str, int], dict[str, Any]] = {}  # (node, pid): one OOM kill
    hardware = host_hardware.HostHardware(lambda line: _when(line, ctx), ctx.node)
    checks = nhc.Nhc(lambda line: _when(line, ctx), ctx.node, lambda t: local_time(t, ctx))
    table: list[str] = []
    start = 0
    for number, line in enumerate(lines, start=1):
        if number - 1 in used:
            continue
        ref = f"{ctx.origin}:{number}"
        stripped = line.strip()
        if stripped.startswith(("|", "+")) and (table or "Health Monitor Report" in stripped
                                                 or "Diagnostic" in stripped
                                                 or stripped.startswith("+")
                                                 or node_health.two_cells(stripped)):
            if not table:
                start = number
            table.append(stripped)
            continue
        if table:
            out.extend(node_health.table(table, ctx, f"{ctx.origin}:{start}"))
            table = []
        health = node_health.health_json(stripped, ctx) if stripped.startswith("{") else None
        if health is not None:
            if not health["node"]:
                out.append(Reject("node", "a health event names no host and none was given",
                                  raw_evidence(line), ref))
            else:
                out.append(health)
            continue
        if "NVRM: Xid" in line:
            out.extend(xid.parse(line, replace(ctx, origin=ref)))
            continue
        if ("AER" in line or "PCIe Bus Error" in line or "EDAC" in line or "pcieport" in line) \
                and hardware.read(line):
            continue
        if ("nhc" in line or "Health check failed" in line or "XID errors" in line) \
                and checks.read(line):
            continue
        # the Xid-less reports, over one line or several (once per GPU and minute)
        if ("fallen off the bus" in line and (lost := xid.off_the_bus(lines, number, ctx))
                is not None) or ("_kgsp" in line and (lost := xid.gsp_timeout(lines, number, ctx))
                                 is not None):
            if xid.first_report(lost, gone):
                out.append(lost)
            continue
        if "blocked for more than" in line:
            time, host, source = _when(line, ctx)
            if (hung := node_health.hung_task(lines, number, host, time, source, ctx)) \
                    is not None:
                out.append(hung)
                continue
        record = _line(line, ctx, ref)
        if isinstance(record, dict) and _merged_kill(kills, record):
            continue  # the kernel's second line of one OOM kill (oom-kill:, Killed process)
        if isinstance(record, dict) and record["attributes"].get("system") == "fabric_manager":
            key = (str(record.get("node")), str(record["time"])[:16])
            if key in fabric:
                continue  # another line of the same failure (systemd's, the script's)
            fabric.add(key)
        if isinstance(record, dict) and line is not originals[number - 1]:
            record["attributes"]["raw"] = raw_evidence(originals[number - 1])  # as written
        if record is not None:
            out.append(record)
    if table:
        out.extend(node_health.table(table, ctx, f"{ctx.origin}:{start}"))
    for record in [*checks.records, *hardware.records]:
        out.append(record if record["node"] else Reject(
            "node", f"{record['type']}: no host in the line and none given by the shipper",
            str(record["attributes"]["raw"])))
    return out


_HEALTHY = re.compile(r"EDAC (?:\w{1,20} )?(?:MC\d{1,3}|\w{1,20}): (?:Giving out device|"
                      r"[^\n]{0,80}?(?:detected|ECC (?:disabled|enabled)))|"
                      r"AER: enabled with IRQ|Node Health Check (?:completed|passed)")


def healthy(text: str) -> bool:
    """Lines this adapter knows and that report nothing wrong (EDAC and AER set-up)."""
    return _HEALTHY.search(text[:200_000]) is not None


ADAPTER = Adapter("node-log", parse, doc="Node and infrastructure logs: Xid, DCGM health, "
                  "mlx5/IB links, Lustre/LNet, NFS, GPFS, S3 SlowDown", line_oriented=True,
                  healthy=healthy)
