"""Real daemons on synthetic nodes with every family a real GPU node has, for the end-to-end fleets.

Several GPUs on the fake NVML, NVMe namespaces, InfiniBand ports with their error counters, the Slurm
owner of every GPU (tests/helpers/node.py lays the node out), and the training ranks that report to
the node's ingest socket. The query audit takes one node's exposition as its dataset's template; the
diagnose e2e runs its jobs on such nodes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import wait_until
from tests.helpers.node import SyntheticNode

# One family of each source: a node serving them all is a whole GPU node.
NODE_FAMILIES = ("trainmon_gpu_power_watts", "trainmon_nvme_reads_completed_total",
                 "trainmon_infiniband_link_downed_total", "trainmon_infiniband_symbol_error_total",
                 "trainmon_gpu_job_info")


def ingest_socket(node: SyntheticNode) -> Path:
    return node.root / "ingest.sock"


@contextmanager
def node_daemon(node: SyntheticNode, nvml_dir: Path, interval: float = 0.5) -> Iterator[Daemon]:
    """A real daemon reading `node` (its GPUs' owners too), once it serves every one of `NODE_FAMILIES`."""
    daemon = start_daemon(node.root, [*node.daemon_args(ingest_socket(node), interval), *node.owner_args()],
                          env=node.daemon_env(nvml_dir))
    try:
        wait_until(lambda: all(f"{name}{{" in daemon.metrics_text() for name in NODE_FAMILIES), timeout=30)
        yield daemon
    finally:
        daemon.stop()


@contextmanager
def growing_ib_errors(node: SyntheticNode, port: int, name: str, every: float = 1.0) -> Iterator[None]:
    """IB port `port` of `node` counts one more error on its counter `name` (`symbol_error`) every `every`
    seconds while the context lasts: a port going bad, seen in any window of a few seconds."""
    path = node.ib_counter(port, name)
    stop = threading.Event()

    def count() -> None:
        while not stop.wait(every):
            partial = path.with_suffix(".partial")  # replaced at once: the daemon never reads half a file
            partial.write_text(f"{int(path.read_text()) + 1}\n")
            os.replace(partial, path)

    thread = threading.Thread(target=count, name="ib-errors", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
