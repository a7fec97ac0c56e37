"""CPU and memory of the kernel-log XID reader at a steady rate and in a flood.

A writer process appends NVRM Xid records (8 GPUs, 4 codes, a foreign bus and a garbled line in
every 50) to a regular file at the given rate; the reader follows it in this process, whose CPU
time (getrusage) is the reader's: the main thread only sleeps. Reported: % of one core, records
read, XIDs counted, series kept (GPU and code pairs), and the growth of peak RSS.

    python -m tests.bench.bench_kmsg [--seconds 10] [--steady 1000] [--flood 1667]
"""

from __future__ import annotations

import multiprocessing
import resource
import tempfile
import time
from pathlib import Path

from tests.bench.common import arguments, machine, table
from trainmon.health.kmsg_reader import KmsgReader
from trainmon.nvml.xid import XidCounts

CODES = (13, 31, 79, 94)


def line(i: int) -> str:
    if i % 50 == 49:
        return f"4,{i},{i},-;NVRM: Xid (PCI:0000:18:00): garbled\n"
    bus = "c1" if i % 50 == 48 else f"{0x18 + 16 * (i % 8):02x}"
    return f"4,{i},{i},-;NVRM: Xid (PCI:0000:{bus}:00): {CODES[i % 4]}, pid=4410, name=python3, Graphics Exception\n"


def write(path: str, rate: int, seconds: float) -> None:
    """`rate` lines a second in batches of 1/20 s, like a driver logging in bursts."""
    batch = max(1, rate // 20)
    start, i = time.monotonic(), 0
    with open(path, "a") as log:
        while (elapsed := time.monotonic() - start) < seconds:
            log.write("".join(line(j) for j in range(i, i + batch)))
            log.flush()
            i += batch
            time.sleep(max(0.0, i / rate - elapsed))


def run(rate: int, seconds: float) -> list[object]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kmsg"
        path.touch()
        counts = XidCounts()
        reader = KmsgReader(path, counts)
        reader.start()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cpu_before = time.process_time()
        writer = multiprocessing.Process(target=write, args=(str(path), rate, seconds))
        writer.start()
        writer.join()
        time.sleep(1.0)  # the reader catches up
        cpu = time.process_time() - cpu_before
        reader.stop()
        status = reader.status()
        rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
        return [rate, f"{100 * cpu / (seconds + 1.0):.2f}%", status.records, status.xids, status.malformed,
                len(counts.snapshot()), f"{rss_growth / 1024:.1f} MiB"]


def main() -> None:
    args = arguments(__doc__ or "", seconds=10.0, steady=1000, flood=1667)
    print(machine())
    rows = [run(args.steady, args.seconds), run(args.flood, args.seconds)]
    print(table(["lines/s", "CPU (one core)", "records", "XIDs", "malformed", "series", "peak RSS growth"], rows))


if __name__ == "__main__":
    main()
