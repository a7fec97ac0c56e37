"""What NCCL's own view costs in series: a job's ranks, communicators, collectives and size classes.

    python -m tests.bench.bench_nccl_cardinality [--ranks 64] [--gpus-per-node 8] [--comms 8]
                                                 [--collectives 2] [--size-classes 2]

One node of the job is built for real: Inspector's JSON dumps (the layout of tests/fixtures/nccl/) of its
`--gpus-per-node` ranks, every rank a member of `--comms` communicators, running `--collectives` kinds of
collective in `--size-classes` size classes each; the `nccl_inspector` collector reads them (no hook: each
rank is known by its GPU) and the series it serves are counted, then multiplied by the job's nodes. RAS: a
status answer of the whole job in NCCL's layout, replayed by the loopback stand-in to the `nccl_ras`
collector, whose series are counted (the same on every node). Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.fixtures.nccl.generate import json_record, ras_status
from tests.helpers.net import wait_until
from tests.helpers.ras import RasStandIn
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.nccl_inspector import NcclInspectorCollector
from trainmon.collectors.nccl_ras import NcclRasCollector
from trainmon.errors import NoData
from trainmon.gpu_inventory import GpuInventory, InventoryGpu
from trainmon.settings import Address, Settings

COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "SendRecv")
SIZES = (32 << 10, 4 << 20, 64 << 20, 512 << 20, 512 << 10)  # one in each size class


def write_dumps(directory: Path, args: argparse.Namespace) -> None:
    for gpu in range(args.gpus_per_node):
        pid = 4000 + gpu
        lines = []
        for comm in range(args.comms):
            header = (f"0x{comm:016x}", f"Group {comm}", gpu, args.ranks, args.ranks // args.gpus_per_node)
            for coll in COLLECTIVES[:args.collectives]:
                for sn, size in enumerate(SIZES[:args.size_classes], start=1):
                    lines.append(json_record(pid, header, coll, sn, size, 100, "kernel_gpu", 150.0))
        (directory / f"node-pid{pid}.log").write_text("".join(lines))


def samples(collection: Collection) -> dict[str, int]:
    return {family.name: len(family.samples) for family in collection.families if family.samples}


def inspector_series(args: argparse.Namespace) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as tmp:
        write_dumps(Path(tmp), args)
        gpus = GpuInventory()
        gpus.publish([InventoryGpu(index=i, uuid=f"GPU-{i}", pids=(4000 + i,)) for i in range(args.gpus_per_node)])
        settings = Settings(nccl_inspector_json_dir=Path(tmp))
        collector = NcclInspectorCollector(settings, NodeResources(gpus=gpus), hostname="node")
        return samples(collector.collect())


def ras_series(args: argparse.Namespace) -> tuple[dict[str, int], int]:
    ranks = list(range(args.ranks))
    per_comm = max(2, args.ranks // args.comms)
    comms = [(f"0x{c:016x}", ranks if c == 0 else ranks[(c - 1) * per_comm % args.ranks:][:per_comm])
             for c in range(args.comms)]
    answer = ras_status(comms, {}, {}).encode()
    ras = RasStandIn(answer)
    try:
        settings = Settings(nccl_ras_addr=Address("127.0.0.1", ras.port))
        collector = NcclRasCollector(settings, NodeResources())

        def answered() -> Collection | None:
            try:
                return collector.collect()
            except NoData:
                return None

        collection = wait_until(answered)
        collector.close()
    finally:
        ras.close()
    assert isinstance(collection, Collection)
    return samples(collection), len(answer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--comms", type=int, default=8)
    parser.add_argument("--collectives", type=int, default=2, choices=range(1, len(COLLECTIVES) + 1))
    parser.add_argument("--size-classes", type=int, default=2, choices=range(1, len(SIZES) + 1))
    args = parser.parse_args()
    nodes = args.ranks // args.gpus_per_node
    start = time.perf_counter()
    inspector = inspector_series(args)
    elapsed = time.perf_counter() - start
    ras, answer_bytes = ras_series(args)
    node_total = sum(inspector.values())
    print(f"job: {args.ranks} ranks on {nodes} nodes, {args.comms} communicators a rank, "
          f"{args.collectives} collectives x {args.size_classes} size classes each")
    print(f"{'nccl_inspector family':<60} {'per node':>9} {'per job':>9}")
    for name, n in sorted(inspector.items()):
        print(f"{name:<60} {n:>9} {n * nodes:>9}")
    print(f"{'nccl_inspector total':<60} {node_total:>9} {node_total * nodes:>9}")
    print(f"nccl_inspector one collection of {args.gpus_per_node} dumps: {elapsed * 1000:.1f} ms")
    print(f"{'nccl_ras family':<60} {'per node':>9}")
    for name, n in sorted(ras.items()):
        print(f"{name:<60} {n:>9}")
    print(f"{'nccl_ras total':<60} {sum(ras.values()):>9}  (RAS answer {answer_bytes} bytes)")


if __name__ == "__main__":
    main()
