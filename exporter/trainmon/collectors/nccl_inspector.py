"""The `nccl_inspector` collector: NCCL Inspector's per-collective GPU timings, as counters per rank.

Reads `--nccl-inspector-dir` (the Prometheus textfiles, one per GPU, rewritten every >= 30 s) and
`--nccl-inspector-json-dir` (the JSON dumps, appended), the formats of parsers/nccl_inspector.py, and
joins each record to the job and rank the hook reports (collectors/nccl_owners.py). Inspector serves
last-window gauges without a rank; this serves counters per {job_id, rank, comm_name, collective,
size_class}, so `rate()` survives a lost window:

- JSON dump: every GPU-timed operation adds to `operations`, `seconds`, `bytes` and the bus-bandwidth
  summary; one timed otherwise (CPU fallback) to `dropped`.
- textfile: every new window adds its mean bus bandwidth to the summary once (the window has no count:
  it gives bandwidth, not totals).

Bounded: at most `MAX_FILES` files a directory and `MAX_CYCLE_BYTES` read a cycle; a textfile over
`MAX_TEXTFILE_BYTES`, or unchanged for `MAX_AGE_S`, is not read; a textfile younger than `SETTLE_S` is
read next cycle (Inspector rewrites it in place). A line cut short (a writer still writing, or dead) is
skipped and counted; a JSON dump that shrinks or is replaced is read again from its start, and one whose
writer's pid (in its name) is not yet known here waits, so that the hook's first report is not raced. Label sets
beyond `MAX_LABEL_SETS`, and communicator names beyond `MAX_COMM_NAMES` a job (then `other`), are
refused and counted; a label set not fed for `--exit-retention` is dropped.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from trainmon.catalog import nccl_inspector as catalog
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.nccl_owners import Owner, Owners, snapshot
from trainmon.collectors.problems import ProblemLog
from trainmon.errors import NoData
from trainmon.families import Metric, counter, gauge, info, summary
from trainmon.gpu_inventory import GpuInventory
from trainmon.ingest.server import IngestServer
from trainmon.parsers.nccl_inspector import (
    Operation,
    RecordError,
    TextfileRead,
    Window,
    parse_record,
    parse_textfile,
)
from trainmon.roots import Root
from trainmon.settings import Settings

log = logging.getLogger(__name__)

MAX_FILES = 256
MAX_TEXTFILE_BYTES = 1 << 20  # "~12-24 KB per GPU" for 8 communicators (Inspector's README)
# JSON grows 200-500 bytes an operation, parsed at ~0.1-0.3 ms each: ~10k operations a cycle at most; the rest
# waits for the next cycle (trainmon_nccl_inspector_backlog_bytes)
MAX_CYCLE_BYTES = 4 << 20
MAX_AGE_S = 600.0
SETTLE_S = 2.0
MAX_LABEL_SETS = 1024  # x 5 series: ~5k a node at most (a 64-rank job with 8 communicators takes 256-960)
MAX_COMM_NAMES = 16
TEXTFILE = re.compile(r"nccl_inspector_metrics_([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.prom")
DUMP_FILE = re.compile(r"(.+)-pid(\d+)\.log")  # "<hostname>-pid<pid>.log"
GPU_LABEL = re.compile(r"GPU(\d+)")
Key = tuple[str, str, str, str, str]


@dataclass(slots=True)
class Totals:
    operations: int = 0
    seconds: float = 0.0
    bytes: int = 0
    dropped: int = 0
    bandwidth_sum: float = 0.0
    bandwidth_count: int = 0
    fed_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Source:
    """Which Inspector output and version told us about a (job, rank), and its GPU."""

    uuid: str
    kind: str  # "textfile" | "json"
    version: str


@dataclass(slots=True)
class Cursor:
    """Where the JSON dump of one file was read to."""

    inode: int
    offset: int


class NcclInspectorCollector:
    name = "nccl_inspector"

    def __init__(self, settings: Settings, resources: NodeResources,
                 clock: Callable[[], float] = time.time, hostname: str | None = None) -> None:
        self._textfile_dir = settings.nccl_inspector_dir
        self._json_dir = settings.nccl_inspector_json_dir
        self._retention = settings.exit_retention
        self._procfs = Root(settings.procfs, "procfs")
        self._ingest: IngestServer | None = resources.ingest
        self._inventory: GpuInventory = resources.gpus
        self._clock = clock
        host = hostname or socket.gethostname()
        # NCCL writes gethostname(): this node's name, or a pod's (the hook reports it) where the job is in one.
        self._hosts = frozenset({host, host.split(".")[0]})
        self._problems = ProblemLog(log, self.name)
        self._totals: dict[Key, Totals] = {}
        self._sources: dict[tuple[str, str], Source] = {}
        self._comm_names: dict[str, set[str]] = {}
        self._windows: dict[str, tuple[int, int, int]] = {}  # textfile -> (inode, mtime_ns, size) counted
        self._cursors: dict[str, Cursor] = {}
        self._skipped: Counter[str] = Counter()
        self._backlog = 0

    def collect(self) -> Collection:
        if self._textfile_dir is None and self._json_dir is None:
            raise NoData("neither --nccl-inspector-dir nor --nccl-inspector-json-dir is set")
        now = self._clock()
        owners = snapshot(self._ingest, self._inventory)
        problems: list[str] = []
        if self._textfile_dir is not None:
            problems += self._read_textfiles(self._textfile_dir, owners, now)
        if self._json_dir is not None:
            problems += self._read_dumps(self._json_dir, owners, now)
        self._expire(now)
        return Collection(families=tuple(self._families()), found=self._found(),
                          skipped=self._problems.update(problems),
                          details={"label_sets": len(self._totals), "skipped_records": dict(self._skipped)})

    def close(self) -> None:
        pass

    # Textfiles: one window per rewrite.

    def _read_textfiles(self, directory: Path, owners: Owners, now: float) -> list[str]:
        problems: list[str] = []
        local = set(owners.gpu_uuid.values())

        def ours(name: str) -> bool:  # not another node's GPU, in a directory the nodes share
            named = TEXTFILE.fullmatch(name)
            return not (named and local and f"GPU-{named.group(1)}" not in local)

        for entry in self._entries(directory, ".prom", ours, problems):
            try:
                st = entry.stat()
            except OSError:
                continue  # rotated away between listing and stat
            identity = (st.st_ino, st.st_mtime_ns, st.st_size)
            if self._windows.get(entry.path) == identity or now - st.st_mtime < SETTLE_S:
                continue
            self._windows[entry.path] = identity
            if now - st.st_mtime > MAX_AGE_S:
                continue
            if st.st_size > MAX_TEXTFILE_BYTES:
                self._skipped["oversized"] += 1
                problems.append(f"{entry.name}: {st.st_size} bytes, over the {MAX_TEXTFILE_BYTES}-byte cap")
                continue
            text = _read(entry.path, 0, MAX_TEXTFILE_BYTES)
            if text is not None:
                self._window(entry.name, parse_textfile(text.decode("utf-8", "replace")), owners, now)
        self._windows = {p: i for p, i in self._windows.items() if os.path.exists(p)}
        return problems

    def _window(self, name: str, read: TextfileRead, owners: Owners, now: float) -> None:
        self._skipped["truncated"] += read.truncated
        self._skipped["malformed"] += read.malformed
        match = TEXTFILE.fullmatch(name)
        uuid = f"GPU-{match.group(1)}" if match else ""
        for window in read.windows:
            local = window.node in self._hosts | owners.pods
            owner = owners.of_gpu(uuid, _gpu_index(window) if local else None, _slurm(window))
            if owner is None:
                self._skipped["unattributed"] += 1
                continue
            totals = self._entry(owner, window.comm_name, window.collective, window.size_class, now)
            if totals is None:
                continue
            self._sources[(owner.job_id, owner.rank)] = Source(owner.uuid, "textfile", window.version)
            if window.bus_bandwidth is not None:
                totals.bandwidth_sum += window.bus_bandwidth
                totals.bandwidth_count += 1

    # JSON dumps: every complete line once.

    def _read_dumps(self, directory: Path, owners: Owners, now: float) -> list[str]:
        problems: list[str] = []
        seen: set[str] = set()
        sizes: dict[str, int] = {}
        budget = MAX_CYCLE_BYTES
        hosts = self._hosts | owners.pods

        def ours(name: str) -> bool:  # written on this node, not another one sharing the directory
            writer = DUMP_FILE.fullmatch(name)
            return writer is None or writer.group(1) in hosts

        for entry in self._entries(directory, ".log", ours, problems):
            seen.add(entry.path)
            writer = DUMP_FILE.fullmatch(entry.name)
            if writer and owners.of_pid(int(writer.group(2)), self._procfs) is None:
                problems.append(f"{entry.name}: pid {writer.group(2)} is no hook rank nor GPU process here (yet); "
                                "not read until it is")
                continue
            try:
                st = entry.stat()
            except OSError:
                continue
            sizes[entry.path] = st.st_size
            cursor = self._cursors.get(entry.path)
            if cursor is None or cursor.inode != st.st_ino or st.st_size < cursor.offset:
                cursor = self._cursors[entry.path] = Cursor(st.st_ino, 0)  # new, replaced or truncated
            if st.st_size == cursor.offset or budget <= 0 or now - st.st_mtime > MAX_AGE_S:
                continue
            chunk = _read(entry.path, cursor.offset, min(budget, st.st_size - cursor.offset))
            if chunk is None:
                continue
            budget -= len(chunk)
            complete = chunk.rfind(b"\n") + 1
            for line in chunk[:complete].splitlines():
                self._operation(line, owners, now)
            cursor.offset += complete
            tail = len(chunk) - complete
            at_end = cursor.offset + tail >= st.st_size
            if tail and at_end and now - st.st_mtime >= SETTLE_S:
                self._skipped["truncated"] += 1  # a record its writer never finished
                cursor.offset += tail
        self._cursors = {p: c for p, c in self._cursors.items() if p in seen}
        self._backlog = sum(max(0, sizes[p] - c.offset) for p, c in self._cursors.items() if p in sizes)
        return problems

    def _operation(self, line: bytes, owners: Owners, now: float) -> None:
        if not line.strip():
            return
        try:
            op = parse_record(line.decode("utf-8", "replace"))
        except RecordError as exc:
            self._skipped[exc.reason] += 1
            return
        owner = owners.of_pid(op.pid, self._procfs)
        if owner is None:
            self._skipped["unattributed"] += 1
            return
        totals = self._entry(owner, op.comm_name, op.collective, op.size_class, now)
        if totals is None:
            return
        self._sources[(owner.job_id, owner.rank)] = Source(owner.uuid, "json", op.version)
        _add(totals, op)

    # Label sets and their budget.

    def _entry(self, owner: Owner, comm_name: str, collective: str, size: str, now: float) -> Totals | None:
        names = self._comm_names.setdefault(owner.job_id, set())
        if comm_name not in names:
            if len(names) >= MAX_COMM_NAMES:
                self._skipped["comm_names"] += 1
                comm_name = "other"
            names.add(comm_name)
        key = (owner.job_id, owner.rank, comm_name, collective, size)
        totals = self._totals.get(key)
        if totals is None:
            if len(self._totals) >= MAX_LABEL_SETS:
                self._skipped["series_budget"] += 1
                return None
            totals = self._totals[key] = Totals()
        totals.fed_at = now
        return totals

    def _expire(self, now: float) -> None:
        self._totals = {k: t for k, t in self._totals.items() if now - t.fed_at <= self._retention}
        live = {(k[0], k[1]) for k in self._totals}
        self._sources = {k: s for k, s in self._sources.items() if k in live}
        jobs = {k[0] for k in live}
        self._comm_names = {j: n for j, n in self._comm_names.items() if j in jobs}

    def _entries(self, directory: Path, suffix: str, ours: Callable[[str], bool],
                 problems: list[str]) -> Iterator[os.DirEntry[str]]:
        """This node's files of `directory` (`ours`), at most `MAX_FILES`, by name."""
        try:
            entries = sorted((e for e in os.scandir(directory)
                              if e.name.endswith(suffix) and ours(e.name) and e.is_file()), key=lambda e: e.name)
        except FileNotFoundError:
            return iter(())  # no job has written yet
        except OSError as exc:
            problems.append(f"{directory}: {exc.strerror or exc}")
            return iter(())
        if len(entries) > MAX_FILES:
            self._skipped["too_many_files"] += len(entries) - MAX_FILES
            problems.append(f"{directory}: {len(entries)} {suffix} files, only the first {MAX_FILES} read")
        return iter(entries[:MAX_FILES])

    # Output.

    def _families(self) -> list[Metric]:
        operations = counter(catalog.NCCL_INSPECTOR_OPERATIONS_TOTAL)
        seconds = counter(catalog.NCCL_INSPECTOR_SECONDS_TOTAL)
        sent, dropped = counter(catalog.NCCL_INSPECTOR_BYTES_TOTAL), counter(catalog.NCCL_INSPECTOR_DROPPED_TOTAL)
        bandwidth = summary(catalog.NCCL_INSPECTOR_BUS_BANDWIDTH_BYTES_PER_SECOND)
        for key, t in sorted(self._totals.items()):
            labels = list(key)
            if t.operations:
                operations.add_metric(labels, t.operations)
                seconds.add_metric(labels, t.seconds)
                sent.add_metric(labels, t.bytes)
            if t.dropped:
                dropped.add_metric(labels, t.dropped)
            if t.bandwidth_count:
                bandwidth.add_metric(labels, count_value=t.bandwidth_count, sum_value=t.bandwidth_sum)
        source = info(catalog.NCCL_INSPECTOR_INFO)
        for (job, rank), s in sorted(self._sources.items()):
            source.add_metric([job, rank, s.uuid, s.kind, s.version], {})
        skipped = counter(catalog.NCCL_INSPECTOR_RECORDS_SKIPPED_TOTAL)
        for reason, n in sorted(self._skipped.items()):
            skipped.add_metric([reason], n)
        backlog = gauge(catalog.NCCL_INSPECTOR_BACKLOG_BYTES)
        backlog.add_metric([], self._backlog)
        return [operations, seconds, sent, dropped, bandwidth, source, skipped, backlog]

    def _found(self) -> tuple[str, ...]:
        ranks = Counter((k[0], k[1]) for k in self._totals)
        return tuple(f"job {job} rank {rank}: {n} label sets from the {self._sources[(job, rank)].kind}"
                     for (job, rank), n in sorted(ranks.items()) if (job, rank) in self._sources)


def _add(totals: Totals, op: Operation) -> None:
    if not op.gpu_timed:
        totals.dropped += 1
        return
    totals.operations += 1
    totals.seconds += op.exec_seconds
    totals.bytes += op.size_bytes
    if op.bus_bandwidth > 0:
        totals.bandwidth_sum += op.bus_bandwidth
        totals.bandwidth_count += 1


def _gpu_index(window: Window) -> int | None:
    match = GPU_LABEL.fullmatch(window.gpu)
    return int(match.group(1)) if match else None


def _slurm(window: Window) -> str:
    return "" if window.slurm_job_id == "unknown" else window.slurm_job_id


def _read(path: str, offset: int, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except OSError:
        return None  # removed or rotated between listing and reading: next cycle


__all__ = ["MAX_LABEL_SETS", "NcclInspectorCollector"]
