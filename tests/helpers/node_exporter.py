"""Debian's node_exporter on a synthetic tree, with only the collectors trainmon overlaps."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.helpers.net import free_port, wait_until

DEFAULT_COLLECTORS = ("--collector.disable-defaults", "--collector.diskstats", "--collector.nvme",
                      "--collector.infiniband")


@contextmanager
def node_exporter(binary: str, proc: Path, sys: Path,
                  collectors: tuple[str, ...] = DEFAULT_COLLECTORS) -> Iterator[str]:
    """Run node_exporter on `proc`/`sys` and yield its /metrics URL."""
    port = free_port()
    process = subprocess.Popen(
        [binary, f"--path.procfs={proc}", f"--path.sysfs={sys}", f"--web.listen-address=127.0.0.1:{port}",
         *collectors], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_until(lambda: httpx.get(url, timeout=2).status_code == 200)
        yield url
    finally:
        process.terminate()
        process.wait(10)
