"""Soak: ranks churn through a real daemon for minutes; RSS, series and threads must stay flat.

    python -m tests.bench.bench_soak [--minutes 10] [--ranks 64]

Every second `--ranks` ranks report; each rank restarts as a new process every ~30 s (a new start
time), one in eight leaves with a goodbye (clean or error) and one in eight goes silent (lost after
--rank-ttl 5), and a new job id appears every 20 s (its exit series expire after --exit-retention 30).
Each minute (and at the end) it prints the daemon's RSS, threads, served series and live ranks.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import tempfile
import time
from pathlib import Path

import httpx

from tests.bench.bench_cardinality import widest_report
from tests.bench.common import arguments, machine, series_count, table
from tests.helpers.daemon import start_daemon
from trainmon import wire


def proc_status(pid: int, key: str) -> int:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith(f"{key}:"))
    return int(line.split()[1])


def total(url: str, name: str) -> float:
    text = httpx.get(url, headers={"Accept": "text/plain"}, timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def main() -> None:
    args = arguments(__doc__ or "", minutes=10.0, ranks=64)
    with tempfile.TemporaryDirectory(prefix="trainmon-soak-") as tmp:
        root = Path(tmp)
        path = str(root / "ingest.sock")
        daemon = start_daemon(root, ["--collectors", "training", "--interval", "1", "--rank-ttl", "5",
                                     "--exit-retention", "30"])
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        url = daemon.url + "/metrics"
        rows = []
        start = time.monotonic()
        next_row = 0.0
        tick = 0
        try:
            while (elapsed := time.monotonic() - start) < args.minutes * 60:
                tick += 1
                job = f"soak-{tick // 20}"
                for rank in range(args.ranks):
                    generation = (tick + rank) // 30  # each rank restarts every ~30 s
                    silent = rank % 8 == 1 and (tick + rank) % 30 > 20
                    if silent:
                        continue
                    base = widest_report(job, rank) if rank % 16 == 0 else narrow_report(job, rank, tick)
                    bye = rank % 8 == 2 and (tick + rank) % 30 == 29
                    report = dataclasses.replace(
                        base, start_time=1_767_000_000.0 + generation, seq=tick, steps=tick,
                        kind="bye" if bye else "report", exit_reason="error" if rank % 16 == 2 else "clean")
                    with contextlib.suppress(BlockingIOError):
                        sock.sendto(wire.encode(report), path)
                if elapsed >= next_row:
                    rows.append(row(daemon.process.pid, url, elapsed))
                    next_row += 60
                time.sleep(1)
            rows.append(row(daemon.process.pid, url, time.monotonic() - start))
        finally:
            sock.close()
            daemon.stop()
    print(f"machine: {machine()}")
    print(f"{args.minutes:g} min, {args.ranks} ranks churning (restarts, goodbyes, silences, new job ids)")
    print(table(["minute", "RSS MB", "threads", "series", "live ranks", "rejected"], rows))


def narrow_report(job: str, rank: int, tick: int) -> wire.Report:
    return wire.Report(job_id=job, rank=rank, pid=os.getpid(), start_time=0.0, seq=tick, collectives=(
        wire.Collective(op="all_reduce", group="default_pg", seconds=float(tick), calls=tick, bytes=tick),))


def row(pid: int, url: str, elapsed: float) -> list[object]:
    return [f"{elapsed / 60:.1f}", f"{proc_status(pid, 'VmRSS') / 1024:.1f}", proc_status(pid, "Threads"),
            series_count(url), int(total(url, "trainmon_ingest_ranks ")), int(total(url, "trainmon_ingest_rejected"))]


if __name__ == "__main__":
    main()
