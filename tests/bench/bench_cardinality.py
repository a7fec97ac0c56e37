"""Series count of one node, how it grows with GPUs, training ranks and IB ports, and the training worst case.

    python -m tests.bench.bench_cardinality [--minimal] [--flood-ranks N] [--scrapes N]

The worst case: 1,024 ranks of the widest report the wire schema allows (every op on 9 groups, 32
NCCL variables, every map full) sent to a daemon with the default caps; it prints the training
samples served, what was refused, and the scrape time of a freshly rendered snapshot in both formats.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import tempfile
import time
from pathlib import Path

import httpx

from tests.bench.common import PROMETHEUS_ACCEPT, machine, percentile, series_count, started_node, table
from tests.helpers.daemon import start_daemon
from tests.helpers.metrics import parse_samples
from tests.helpers.net import wait_until
from trainmon import wire
from trainmon.collectors.training import rank_series

BASE = {"gpus": 8, "namespaces": 16, "ports": 8, "ranks": 8}
VARIATIONS = [BASE, {**BASE, "gpus": 1}, {**BASE, "gpus": 4}, {**BASE, "ranks": 0}, {**BASE, "ranks": 1},
              {**BASE, "ranks": 32}, {**BASE, "ports": 1}, {**BASE, "ports": 32}, {**BASE, "namespaces": 1}]
# One variation of each dimension beside the base: all the slopes need (a smoke run's node rows).
MINIMAL_VARIATIONS = [BASE, {**BASE, "gpus": 1}, {**BASE, "ranks": 0}, {**BASE, "ports": 1}, {**BASE, "namespaces": 1}]


def widest_report(job_id: str, rank: int) -> wire.Report:
    """The largest report the schema allows: every op on every group, every env var, every map full."""
    groups = [f"group-{g}" for g in range(wire.MAX_GROUPS + 1)]
    return wire.Report(
        job_id=job_id, rank=rank, pid=os.getpid(), start_time=1_767_000_000.0, seq=1, phase="eval",
        collectives=tuple(wire.Collective(op=op, group=g, seconds=1.0, calls=1, bytes=1) for op in wire.OPS
                          for g in groups),
        group_sizes=dict.fromkeys(groups, 8), group_seqs=tuple(wire.GroupSeq(g, 2, 1) for g in groups),
        inflight=tuple(wire.Inflight(g, "all_reduce", 1_767_000_000.0) for g in groups),
        nccl_env={f"NCCL_VAR_{i}": "x" * 40 for i in range(wire.MAX_ENV)},
        phase_seconds={f"phase{i}": 1.0 for i in range(wire.MAX_PHASES + 1)},
        hook_errors={f"kind{i}": 1 for i in range(wire.MAX_HOOK_ERROR_KINDS)}, parallel={"tp": 8},
        loss=1.0, grad_norm=1.0, loss_scaler="torch_amp", loss_scale=1.0, last_step=1.0, first_step=1.0,
        model_flops=1.0, cuda_alloc_retries=0, cuda_ooms=0,
    )


def node_rows(variations: list[dict[str, int]]) -> list[list[object]]:
    rows: list[list[object]] = []
    for variation in variations:
        with started_node(interval=1.0, with_node_exporter=False, **variation) as node:  # type: ignore[arg-type]
            rows.append([variation["gpus"], variation["namespaces"], variation["ports"], variation["ranks"],
                         series_count(node.trainmon.url + "/metrics")])
    return rows


def worst_case(flood_ranks: int, scrapes: int) -> list[list[object]]:
    """Flood a training-only daemon with the widest ranks; one row per exposition format."""
    with tempfile.TemporaryDirectory(prefix="trainmon-bench-") as tmp:
        root = Path(tmp)
        daemon = start_daemon(root, ["--collectors", "training", "--interval", "1"])
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                for rank in range(flood_ranks):
                    with contextlib.suppress(BlockingIOError):
                        sock.sendto(wire.encode(widest_report("wide", rank)), str(root / "ingest.sock"))
            text = wait_until(lambda: (t := daemon.metrics_text()) and _total(t, "trainmon_ingest_ranks")
                              + _total(t, "trainmon_ingest_rejected_total") >= flood_ranks and t, timeout=60)
            training = sum(1 for line in str(text).splitlines()
                           if line.startswith(("trainmon_train_", "trainmon_nccl_")))
            ranks, refused = int(_total(str(text), "trainmon_ingest_ranks")), _refused(str(text))
            rows = []
            for accept in (PROMETHEUS_ACCEPT, "text/plain"):
                times = []
                for _ in range(scrapes):
                    time.sleep(1.1)  # a new snapshot: the scrape renders it
                    start = time.perf_counter()
                    httpx.get(daemon.url + "/metrics", headers={"Accept": accept}, timeout=30).raise_for_status()
                    times.append(time.perf_counter() - start)
                rows.append([accept.split(";")[0].split(",")[0], training, ranks, refused,
                             f"{percentile(times, 0.5) * 1000:.0f}", f"{max(times) * 1000:.0f}"])
            return rows
        finally:
            daemon.stop()


def _total(text: str, name: str) -> float:
    return sum(v for (n, _), v in parse_samples(text).items() if n == name)


def _refused(text: str) -> str:
    return ", ".join(f"{dict(labels)['reason']} {v:.0f}" for (n, labels), v in sorted(parse_samples(text).items())
                     if n == "trainmon_ingest_rejected_total")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minimal", action="store_true", help="one variation per dimension (the slopes only)")
    parser.add_argument("--flood-ranks", type=int, default=1024, help="ranks of the worst case")
    parser.add_argument("--scrapes", type=int, default=5, help="timed scrapes per exposition format")
    args = parser.parse_args()
    variations = MINIMAL_VARIATIONS if args.minimal else VARIATIONS
    rows = node_rows(variations)
    base = rows[0][4]

    def slope(index: int, key: str) -> float:
        other = next(r for r, v in zip(rows, variations, strict=True)
                     if v[key] != BASE[key] and v == {**BASE, key: v[key]})
        return (base - other[4]) / (BASE[key] - other[index])  # type: ignore[operator]

    print(f"machine: {machine()}")
    print(table(["gpus", "nvme namespaces", "ib ports", "ranks", "series"], rows))
    print(f"per GPU {slope(0, 'gpus'):.0f} series, per NVMe namespace {slope(1, 'namespaces'):.0f}, "
          f"per IB port {slope(2, 'ports'):.0f}, per training rank {slope(3, 'ranks'):.0f} "
          "(process_* and self-metrics are the constant rest)")
    print(f"worst case per training rank: {rank_series(widest_report('wide', 0))} series; "
          f"{args.flood_ranks} such ranks against the default caps:")
    print(table(["format", "training samples", "live ranks", "refused", "render p50 ms", "render max ms"],
                worst_case(args.flood_ranks, args.scrapes)))


if __name__ == "__main__":
    main()
