"""trainmon.diagnose.collect's hardware queries against a real Prometheus 2.42, over series backfilled by
`promtool tsdb create-blocks-from openmetrics`: a drive 100 times slower than before and than its sibling, and an
InfiniBand port back at half rate after a flap, are found; healthy jitter, a drift under the floor, a storage
rail slower by design and a RoCE port are not."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.alerting_stack import served
from tests.helpers.net import free_port
from tests.helpers.tools import require_tool
from trainmon.diagnose.collect import Collector
from trainmon.diagnose.model import Hardware
from trainmon.diagnose.prometheus import PrometheusClient

SCRAPE = 15
MINUTES = 40
WINDOW = 600  # diagnose --since 10m: the drive and the port changed 10 minutes ago
N1, N2 = "n1:9842", "n2:9842"
MODEL = "SAMSUNG MZQL27T6HBLA-00A07"
NDR, HDR = 50e9, 25e9  # bytes per second of 400 and 200 Gb/s
COMPUTE_RAIL, STORAGE_RAIL = "MT_0000000838", "MT_0000000223"


def nvme(instance: str, device: str, latency: Callable[[int], float]) -> list[tuple[str, Callable[[int], float]]]:
    """A namespace serving 1,000 reads a second, each taking `latency(age)` seconds (age: seconds before the end)."""
    labels = f'instance="{instance}",device="{device}"'
    reads = 1000.0

    def read_time(t: int) -> float:  # the integral of 1,000 x latency over the scrapes so far
        return sum(reads * SCRAPE * latency(u) for u in range(MINUTES * 60, t, -SCRAPE))

    return [
        (f"trainmon_nvme_reads_completed_total{{{labels}}}", lambda t: reads * (MINUTES * 60 - t)),
        (f"trainmon_nvme_read_time_seconds_total{{{labels}}}", read_time),
        (f"trainmon_nvme_writes_completed_total{{{labels}}}", lambda t: 0.0),
        (f"trainmon_nvme_write_time_seconds_total{{{labels}}}", lambda t: 0.0),
        (f'trainmon_nvme_info{{{labels},controller="{device[:5]}",model="{MODEL}",serial="S{device}",'
         'firmware="GDC5"}', lambda t: 1.0),
    ]


def port(instance: str, device: str, rate: Callable[[int], float], layer: str = "InfiniBand",
         board: str = COMPUTE_RAIL) -> list[tuple[str, Callable[[int], float]]]:
    labels = f'instance="{instance}",device="{device}"'
    return [
        (f'trainmon_infiniband_rate_bytes_per_second{{{labels},port="1"}}', rate),
        (f'trainmon_infiniband_state_id{{{labels},port="1"}}', lambda t: 4.0),
        (f'trainmon_infiniband_port_info{{{labels},port="1",link_layer="{layer}",state="ACTIVE",'
         'physical_state="LinkUp"}', lambda t: 1.0),
        (f'trainmon_infiniband_info{{{labels},board_id="{board}",firmware_version="28.39.1002",hca_type="MT4129"}}',
         lambda t: 1.0),
    ]


def series() -> list[tuple[str, Callable[[int], float]]]:
    recent = WINDOW  # what changed, changed this many seconds before the end
    return [
        *nvme(N1, "nvme0n1", lambda age: 0.0001 if age // SCRAPE % 2 else 0.0003),  # healthy jitter
        *nvme(N1, "nvme1n1", lambda age: 0.012 if age <= recent else 0.00015),  # 80x slower: the culprit
        *nvme(N2, "nvme0n1", lambda age: 0.0015 if age <= recent else 0.00015),  # 10x, but under 2 ms
        *port(N1, "mlx5_0", lambda age: NDR),
        *port(N1, "mlx5_1", lambda age: NDR),
        *port(N1, "mlx5_2", lambda age: HDR if age <= recent else NDR),  # flapped, trained at half rate
        *port(N1, "mlx5_3", lambda age: HDR, board=STORAGE_RAIL),  # the storage rail: HDR by design
        *port(N1, "mlx5_4", lambda age: 12.5e9, layer="Ethernet"),  # RoCE: not the IB rails' peer
        *port(N2, "mlx5_0", lambda age: NDR),
    ]


def openmetrics(end: int) -> str:
    """Every series scraped each 15 s over the 40 minutes to `end` (untyped: promtool needs no metadata)."""
    lines = []
    for name, value in series():
        scraped = name.replace("{", '{job="trainmon",', 1)
        lines += [f"{scraped} {value(age)} {end - age}" for age in range(MINUTES * 60, -1, -SCRAPE)]
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    binary, promtool = require_tool("prometheus"), require_tool("promtool")
    work = tmp_path_factory.mktemp("collect")
    end = int(time.time()) - 60
    (work / "node.om").write_text(openmetrics(end))
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(work / "node.om"),
                    str(work / "tsdb")], check=True, capture_output=True, timeout=300)
    (work / "prometheus.yml").write_text("{}\n")
    url = f"http://127.0.0.1:{free_port()}"
    argv = [binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address={url.removeprefix('http://')}"]
    with served(argv, work / "prometheus.log", url + "/-/ready"):
        yield url, end


def found(prometheus: tuple[str, int], signal: str) -> list[Hardware]:
    url, end = prometheus
    hardware = Collector(PrometheusClient(url), now=end, window=WINDOW).hardware({N1, N2})
    return [h for h in hardware if h.signal == signal]


def test_a_drive_100_times_slower_than_its_past_and_its_sibling_is_found_not_jitter_or_a_drift_under_2ms(
        prometheus: tuple[str, int]) -> None:
    assert [Hardware("nvme_latency", N1, "nvme1n1")] == found(prometheus, "nvme_latency")


def test_a_port_back_at_half_rate_is_found_not_the_storage_rail_or_a_roce_port(
        prometheus: tuple[str, int]) -> None:
    assert [Hardware("ib_degraded", N1, "mlx5_2/1")] == found(prometheus, "ib_degraded")
