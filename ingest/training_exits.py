"""How a training job says a rank or its fabric failed, beyond NCCL's watchdog and
torchelastic (part of the training-log adapter, `ingest/nccl.py`):

- NCCL's verbs wrapper: `host:pid:tid [3] misc/ibvwrap.cc:284 NCCL WARN Call to
  ibv_modify_qp failed with error No such device` (`ibvwrap.c:160` in older NCCL) ->
  `comm.nccl_error` on the line's host, with the verbs call, the error and the CUDA device:
  the NIC or the fabric refused the queue pair, not the job's code;
- Lightning's launcher: `[rank: 1] Child process with PID 2977 terminated with code 1.
  Forcefully terminating all other processes to avoid zombies` -> `job.worker_exited` of
  that local rank (a negative code is the signal that ended it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_IBV = re.compile(r"(?:(?<![\w.-])(?P<host>[\w.-]++):(?P<pid>\d++):\d++ )?(?:\[(?P<dev>\d++)\] )?"
                  r"(?:[\w/.-]{0,120}ibvwrap\.cc?:\d{1,6} )?NCCL WARN Call to "
                  r"(?P<call>ibv_\w{1,64}) failed(?: with error (?P<error>[^\n]{1,300}))?")
_LIGHTNING = re.compile(r"\[rank: (?P<rank>\d{1,7})\] Child process with PID (?P<pid>\d{1,10}) "
                        r"terminated with code (?P<code>-?\d{1,10})\.")
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV",
            15: "SIGTERM"}


@dataclass
class Exit:
    type: str
    attributes: dict[str, Any] = field(default_factory=dict)
    node: str = ""


def read(line: str) -> Exit | None:
    """The failure one line of a training job's output reports, or None."""
    if "ibv_" in line and (m := _IBV.search(line)):
        attrs: dict[str, Any] = {"error": m["call"], "detail": (m["error"] or "").strip(),
                                 "device": m["dev"] or "", "layer": "ibverbs"}
        if m["pid"]:
            attrs["pid"] = int(m["pid"])
        return Exit("comm.nccl_error", attrs, m["host"] or "")
    if "Child process with PID" in line and (m := _LIGHTNING.search(line)):
        code = int(m["code"])
        attrs = {"local_rank": int(m["rank"]), "pid": int(m["pid"]), "exit_code": code,
                 "reported_by": "lightning launcher"}
        if code < 0:
            attrs["signal"] = _SIGNALS.get(-code, f"signal {-code}")
        return Exit("job.worker_exited", attrs)
    return None
