"""NCCL Inspector's two file formats, as its source writes them (NVIDIA/nccl `plugins/profiler/inspector/`).

Prometheus textfile (`inspector_prom.cc`, `NCCL_INSPECTOR_PROM_DUMP=1`): one file per GPU,
`nccl_inspector_metrics_<CUDA device UUID>.prom`, truncated and rewritten every dump (at least 30 s apart),
one `name{labels} value` line per bucket and gauge, no `# HELP`/`# TYPE` lines. The values are the window's
geometric-mean bus bandwidth (`nccl_bus_bandwidth_gbs`, GB/s) and mean execution time
(`nccl_collective_exec_time_microseconds`) per (communicator, collective, message-size bucket, algorithm);
P2P lines use `nccl_p2p_*` and a `p2p_operation` label. The window carries no operation count.

JSON dump (`inspector_json.cc`, output format v4.x): `<hostname>-pid<pid>.log`, appended, one object a line:
`{"header": {"id", "comm_name", "rank", "n_ranks", "nnodes"}, "metadata": {"inspector_output_format_version",
"git_rev", "rec_mechanism", "dump_timestamp_us", "hostname", "pid"}, "coll_perf": {"coll", "coll_sn",
"coll_msg_size_bytes", "coll_exec_time_us", "coll_timing_source", "coll_algobw_gbs", "coll_busbw_gbs"}}`
(`p2p_perf` with `p2p_*` keys for P2P operations).

Both parsers take text and return records plus what they could not read; they never raise on bad input.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

# (upper bound in bytes, label): a handful of classes, so message sizes that vary do not multiply series.
SIZE_CLASSES = ((64 << 10, "<64KiB"), (1 << 20, "<1MiB"), (16 << 20, "<16MiB"), (256 << 20, "<256MiB"))
LARGEST_CLASS = ">=256MiB"
# NCCL's function names (`ncclFuncToString`) -> the hook's `op` spelling; anything else is `other`.
COLLECTIVES = {
    "AllReduce": "all_reduce", "AllGather": "all_gather", "AllGatherV": "all_gather", "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast", "Reduce": "reduce", "All2All": "all_to_all", "AlltoAll": "all_to_all",
    "SendRecv": "send_recv", "Send": "send_recv", "Recv": "send_recv",
}
JSON_FORMAT_MAJOR = "v4"  # the JSON layout read here; another major version is skipped as `version`
GPU_TIMED = "kernel_gpu"
MAX_LABEL = 128
GBS = 1e9  # Inspector's GB/s are decimal (bytes / µs / 1000)
UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
SIZE_BUCKET = re.compile(r"(\d+)-\d+(B|KB|MB|GB|TB)")
LINE = re.compile(r'(nccl_(?:p2p_)?(?:bus_bandwidth_gbs|collective_exec_time_microseconds|exec_time_microseconds))'
                  r'\{((?:[a-z0-9_]+="(?:[^"\\]|\\.)*",?)*)\}\s+(\S+)')
LABEL = re.compile(r'([a-z0-9_]+)="((?:[^"\\]|\\.)*)"')


def label_text(text: str) -> bool:
    """Whether `text` may become a label value: printable, not empty, at most `MAX_LABEL` characters."""
    return 0 < len(text) <= MAX_LABEL and text.isprintable()


def size_class(size_bytes: float) -> str:
    for bound, label in SIZE_CLASSES:
        if size_bytes < bound:
            return label
    return LARGEST_CLASS


def collective_name(nccl_name: str) -> str:
    return COLLECTIVES.get(nccl_name, "other")


@dataclass(frozen=True, slots=True)
class Window:
    """One bucket of one textfile window: a mean bus bandwidth (bytes/s) and a mean execution time."""

    comm_name: str
    collective: str
    size_class: str
    bus_bandwidth: float | None
    exec_seconds: float | None
    version: str
    gpu: str  # Inspector's `gpu` label, "GPU<CUDA device index>"
    node: str  # Inspector's `node` label: the writer's hostname
    slurm_job_id: str  # "unknown" outside Slurm


@dataclass(frozen=True, slots=True)
class TextfileRead:
    windows: tuple[Window, ...]
    truncated: int  # a last line cut short by a writer still writing (or dead mid-write)
    malformed: int


def parse_textfile(text: str) -> TextfileRead:
    """One `.prom` file: its buckets, the bandwidth and time lines of a bucket merged into one `Window`."""
    lines = text.split("\n")
    truncated = 0
    if lines and lines[-1] != "":  # no newline after the last line: the writer had not finished it
        truncated, lines = 1, lines[:-1]
    buckets: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
    malformed = 0
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        match = LINE.fullmatch(line.strip())
        value = _float(match.group(3)) if match else None
        if match is None or value is None:
            malformed += 1
            continue
        labels = tuple(LABEL.findall(match.group(2)))
        kind = "bus" if "bandwidth" in match.group(1) else "time"
        buckets.setdefault(labels, {})[kind] = value
    windows = [w for labels, values in buckets.items() if (w := _window(dict(labels), values)) is not None]
    malformed += len(buckets) - len(windows)
    return TextfileRead(windows=tuple(windows), truncated=truncated, malformed=malformed)


def _window(labels: dict[str, str], values: dict[str, float]) -> Window | None:
    operation = labels.get("collective", labels.get("p2p_operation"))
    bucket = SIZE_BUCKET.fullmatch(labels.get("message_size", ""))
    if operation is None or bucket is None or not label_text(labels.get("comm_name", "")):
        return None
    lower = int(bucket.group(1)) * UNITS[bucket.group(2)]
    bus, time_us = values.get("bus"), values.get("time")
    return Window(comm_name=labels["comm_name"], collective=collective_name(operation), size_class=size_class(lower),
                  bus_bandwidth=bus * GBS if bus is not None and bus > 0 else None,
                  exec_seconds=time_us / 1e6 if time_us is not None and time_us > 0 else None,
                  version=labels.get("version", "unknown"), gpu=labels.get("gpu", ""), node=labels.get("node", ""),
                  slurm_job_id=labels.get("slurm_job_id", "unknown"))


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation of a JSON dump, timed by the GPU or not (`gpu_timed`)."""

    pid: int
    comm_name: str
    collective: str
    size_class: str
    size_bytes: int
    exec_seconds: float
    bus_bandwidth: float  # bytes/s
    gpu_timed: bool
    version: str


class RecordError(ValueError):
    """A JSON dump line that is not an Inspector record; `reason` is `malformed` or `version`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def parse_record(line: str) -> Operation:
    """One line of a JSON dump.

    Raises:
        RecordError: not JSON, not an Inspector record, or a format version this parser does not read.
    """
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise RecordError("malformed", f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RecordError("malformed", "not a JSON object")
    header, meta = obj.get("header"), obj.get("metadata")
    perf, prefix = (obj.get("coll_perf"), "coll") if "coll_perf" in obj else (obj.get("p2p_perf"), "p2p")
    if not (isinstance(header, dict) and isinstance(meta, dict) and isinstance(perf, dict)):
        raise RecordError("malformed", "no header, metadata and coll_perf/p2p_perf objects")
    version = str(meta.get("inspector_output_format_version", ""))
    if version.split(".")[0] != JSON_FORMAT_MAJOR:
        raise RecordError("version", f"output format {version!r}, not {JSON_FORMAT_MAJOR}.x")
    try:
        size = int(perf[f"{prefix}_msg_size_bytes"])
        exec_us = float(perf[f"{prefix}_exec_time_us"])
        busbw = float(perf[f"{prefix}_busbw_gbs"])
        pid = int(meta["pid"])
        name, source = str(perf[prefix]), str(perf[f"{prefix}_timing_source"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError("malformed", f"missing or bad field: {exc}") from None
    if size < 0 or not (math.isfinite(exec_us) and exec_us >= 0 and math.isfinite(busbw) and busbw >= 0):
        raise RecordError("malformed", "negative or non-finite size, time or bandwidth")
    comm_name = str(header.get("comm_name") or "unknown")
    if not label_text(comm_name):
        raise RecordError("malformed", "a comm_name that cannot be a label value")
    return Operation(pid=pid, comm_name=comm_name, collective=collective_name(name),
                     size_class=size_class(size), size_bytes=size, exec_seconds=exec_us / 1e6,
                     bus_bandwidth=busbw * GBS, gpu_timed=source == GPU_TIMED, version=version)


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


__all__ = ["LARGEST_CLASS", "SIZE_CLASSES", "Operation", "RecordError", "TextfileRead", "Window",
           "collective_name", "parse_record", "parse_textfile", "size_class"]
