"""What the daemon costs a node at the default interval: CPU seconds per hour and RSS.

The node of bench_scrape (8 GPUs on the fake NVML with GPM, 16 NVMe namespaces, 8 IB ports, 8 ranks
reporting once a second), scraped every 15 s as Prometheus would. CPU time is the daemon process's
own accounting (utime + stime in /proc/<pid>/stat), RSS is VmRSS at the end.

    python -m tests.bench.bench_daemon_cost [--minutes 10] [--interval 5.0]
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.bench.common import Scraper, arguments, machine, started_node, table

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of the line)


def rss_mb(pid: int) -> float:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def main() -> None:
    args = arguments(__doc__ or "", minutes=10.0, interval=5.0)
    with started_node(interval=args.interval, with_node_exporter=False) as node:
        pid = node.trainmon.process.pid
        scraper = Scraper(node.trainmon.url + "/metrics")
        start_cpu, start_wall, start_rss = cpu_seconds(pid), time.monotonic(), rss_mb(pid)
        samples = []
        step = 10
        next_scrape = 0.0
        while (elapsed := time.monotonic() - start_wall) < args.minutes * 60:
            step += 1
            node.feeder.send_all(step)
            if elapsed >= next_scrape:
                scraper.scrape()
                next_scrape += 15
            if int(elapsed) % 60 == 0:
                samples.append((elapsed, cpu_seconds(pid) - start_cpu, rss_mb(pid)))
            time.sleep(1)
        used = cpu_seconds(pid) - start_cpu
        wall = time.monotonic() - start_wall
        end_rss = rss_mb(pid)
        scraper.close()
    per_hour = used / wall * 3600
    print(f"machine: {machine()}")
    print(f"{wall / 60:.1f} min at --interval {args.interval}, 8 ranks x 1 msg/s, a scrape every 15 s")
    print(table(["measure", "value", "goal"], [
        ["CPU seconds per hour", f"{per_hour:.1f}", "<= 18.0"],
        ["share of one core", f"{used / wall * 100:.3f}%", "<= 0.5%"],
        ["RSS at start (MB)", f"{start_rss:.1f}", ""],
        ["RSS at end (MB)", f"{end_rss:.1f}", "<= 80"],
    ]))


if __name__ == "__main__":
    main()
