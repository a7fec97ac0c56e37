"""The daemon's ingest capacity: report datagrams per second it takes without dropping any.

    python -m tests.bench.bench_ingest [--rates 1000,2000,...]

Prints figures; asserts nothing. Senders blast realistic 8-rank reports at the daemon's own ingest
server (built as `trainmon serve` builds it, in this process) over the Unix socket, at rising rates,
for one second each, from another process; a rate holds when every datagram sent is accepted. The hook's sender drops on
EAGAIN, so those drops are counted on the sending side, exactly as in training.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import socket
import tempfile
import time
from pathlib import Path

from trainmon import wire
from trainmon.daemon import build_ingest
from trainmon.settings import Settings

RANKS = 64
RATES = (1_000, 2_000, 5_000, 10_000, 20_000, 40_000)  # offered in turn, one second each
TEMPLATE = wire.Report(
    job_id="bench", rank=0, pid=0, start_time=1_767_000_000.0, seq=1, world_size=RANKS, uuid="GPU-x",
    backend="nccl", framework="ddp", loss_scaler="torch_amp", loss_scale=65536.0, steps=1000, samples=32000,
    tokens=10**8, step_buckets=(0, 0, 10, *(1000,) * 11), step_seconds_sum=500.0, last_step=1_767_000_100.0,
    comm_wait=50.0, data_wait=5.0, group_sizes={"default_pg": RANKS, "TENSOR_MODEL_PARALLEL_GROUP": 8},
    collectives=tuple(wire.Collective(op=op, group=g, seconds=12.5, calls=10**5, bytes=10**12)
                      for op in ("all_reduce", "all_gather", "reduce_scatter")
                      for g in ("default_pg", "TENSOR_MODEL_PARALLEL_GROUP")),
    nccl_env={"NCCL_ALGO": "Ring", "NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "eth0"}, parallel={"tp": 8, "dp": 8},
)


def blast(path: Path, rate: int, seq: int) -> tuple[int, int]:
    """Send `rate` datagrams within one second, paced; return (sent, dropped with EAGAIN)."""
    payloads = [wire.encode(dataclasses.replace(TEMPLATE, rank=i % RANKS, seq=seq + i, pid=os.getpid()))
                for i in range(rate)]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setblocking(False)
    sent = dropped = 0
    start = time.perf_counter()
    for i, payload in enumerate(payloads):
        while time.perf_counter() - start < i / rate:
            pass
        try:
            sock.sendto(payload, str(path))
            sent += 1
        except BlockingIOError:
            dropped += 1
    sock.close()
    return sent, dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rates", default=",".join(map(str, RATES)), help="datagrams per second offered, in turn")
    rates = [int(rate) for rate in parser.parse_args().rates.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ingest.sock"
        ingest = build_ingest(Settings(ingest_socket=str(path), max_ranks=RANKS))
        ingest.maintain()
        print(f"datagram {len(wire.encode(TEMPLATE))} bytes, {RANKS} ranks")
        print(f"{'offered/s':>10}{'accepted':>10}{'dropped':>10}")
        seq = 1
        for rate in rates:
            before = ingest.table.view().messages
            with multiprocessing.get_context("spawn").Pool(1) as pool:  # its own GIL, like a training process
                sent, dropped = pool.apply(blast, (path, rate, seq))
            seq += rate
            time.sleep(0.3)  # let the receiver drain
            accepted = ingest.table.view().messages - before
            print(f"{rate:>10}{accepted:>10}{dropped + sent - accepted:>10}")
        ingest.close()


if __name__ == "__main__":
    main()
