"""What a failure message says, in one place for the adapters and the detector.

`classify(text)` names the failure a line of text reports (a worker's exit message, a
scheduler's reason, a log line): `oom`, `ecc`, `gpu_lost`, `enospc`, `io_error`,
`illegal_memory`, `segfault`, `dataloader`, `bus_error`, `nccl_timeout`, `nccl_error`, or
None ("core dumped" alone names no signal: an abort dumps core too). The order
below is the precedence: an NCCL error that says "CUDA out of memory" is an OOM, a crash
that mentions an ECC error is the GPU's. `FAILURE_CLASS` maps a label to the incident class
the rules use for it.
"""

from __future__ import annotations

import functools
import re

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [(label, re.compile(pattern, re.I)) for
                                                label, pattern in [
    ("ecc", r"uncorrectable ECC|ECC error|double[- ]bit (?:ECC )?error|\bDBE\b|"
            r"ecc_uncorrected|row remap(?:ping)? failure"),
    ("gpu_lost", r"fallen off the bus|GPU is lost|GPU has been lost|"
                 r"unable to determine the device handle"),
    ("enospc", r"No space left on device|\bENOSPC\b|errno:? 28\b|Disk quota exceeded|"
               r"\bEDQUOT\b"),
    ("oom", r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|"
            r"out of memory|Cannot allocate memory|oom[-_ ]kill|Killed process \d+"),
    ("illegal_memory", r"illegal memory access|misaligned address|"
                       r"CUDA error: an illegal|unspecified launch failure"),
    ("segfault", r"Segmentation fault|\bSIGSEGV\b|signal 11\b|segfault at"),
    ("io_error", r"Input/output error|\bEIO\b|errno:? 5\b|Stale file handle|"
                 r"Transport endpoint is not connected"),
    ("dataloader", r"DataLoader worker|dataloader|insufficient shared memory"),
    # a bus error is not a segfault: a mapped file truncated under it, /dev/shm exhausted
    ("bus_error", r"\bSIGBUS\b|Bus error|signal 7\b"),
    ("nccl_timeout", r"Watchdog caught collective operation timeout|"
                     r"collective operation timeout|NCCL[^\n]{0,80}timed? ?out"),
    ("nccl_error", r"NCCL error|nccl(?:System|Internal|Remote|Unhandled(?:Cuda)?|"
                   r"Invalid(?:Argument|Usage))Error|NCCL WARN"),
]]

FAILURE_CLASS = {"ecc": "gpu_hardware", "gpu_lost": "gpu_hardware", "enospc": "storage_capacity",
                 "oom": "oom", "illegal_memory": "code_error", "segfault": "code_error",
                 "io_error": "storage_io", "dataloader": "dataloader", "bus_error": "code_error",
                 "nccl_timeout": "nccl_hang", "nccl_error": "nccl_hang"}
LABELS = tuple(label for label, _ in _PATTERNS)


@functools.lru_cache(maxsize=8192)
def classify(text: str) -> str | None:
    """The failure `text` reports, or None."""
    if not text:
        return None
    for label, pattern in _PATTERNS:
        if pattern.search(text):
            return label
    return None
