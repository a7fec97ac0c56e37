"""What the `fs` collector adds to a collection cycle: 3 Lustre mounts x 7 OSCs and one NFS mount.

    python -m tests.bench.bench_fs [--cycles N] [--nfs-mounts N]

A synthetic tree built from the real client samples (tests/fixtures/fs): per cycle mountinfo,
mountstats, 3 llite stats and 21 OSC stats and import files are read and parsed. The collector
runs in the background cycle, so this is what it adds there; a scrape renders the snapshot it left
(the series count below), never reading a file. `--nfs-mounts N` adds N NFSv4.2 mounts (~5 KB of
mountstats each, every operation counted), as on a container host. Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tests.bench.common import machine
from tests.helpers.fs_trees import add_nfs_mounts, build_fs_tree
from trainmon.collectors.base import NodeResources
from trainmon.collectors.fs import FsCollector
from trainmon.settings import Settings

LUSTRE_MOUNTS = ("scratch", "datasets", "checkpoints")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=500)
    parser.add_argument("--nfs-mounts", type=int, default=0, help="NFSv4.2 mounts added (default 0)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        proc, system = build_fs_tree(Path(root), lustre=LUSTRE_MOUNTS)
        add_nfs_mounts(proc, [f"/mnt/home{n}" for n in range(args.nfs_mounts)])
        collector = FsCollector(Settings(procfs=proc, sysfs=system), NodeResources())
        start = time.perf_counter()
        collection = collector.collect()
        first_ms = (time.perf_counter() - start) * 1e3
        timings = []
        for _ in range(args.cycles):
            start = time.perf_counter()
            collector.collect()
            timings.append((time.perf_counter() - start) * 1e3)
    timings.sort()
    series = sum(len(family.samples) for family in collection.families)
    print(f"fs collector, {len(LUSTRE_MOUNTS)} Lustre mounts x 7 OSCs + {1 + args.nfs_mounts} NFS mounts, "
          f"{args.cycles} cycles ({machine()})")
    print(f"  first cycle (no mountinfo parse or NFS block reused yet): {first_ms:.3f} ms")
    print(f"  per cycle: p50 {statistics.median(timings):.3f} ms, p90 {timings[int(len(timings) * 0.9)]:.3f} ms, "
          f"max {timings[-1]:.3f} ms")
    print(f"  series served: {series}; skipped: "
          f"{len(collection.skipped)} {[note[:90] for note in collection.skipped[:2]]}")


if __name__ == "__main__":
    main()
