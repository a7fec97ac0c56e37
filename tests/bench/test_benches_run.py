"""The benchmarks still run and print their tables (short settings; no figure is asserted).

The longest runs have files of their own (test_bench_cardinality_runs.py, test_bench_fleet_runs.py), so that
pytest-xdist (`--dist loadfile`) runs them beside these, not after them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tools import require_tool

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("bench", "args", "expected"), [
    ("bench_scrape", ["--scrapes", "5", "--clients", "3", "--per-client", "2"], "p50 ratio trainmon/node_exporter"),
    ("bench_daemon_cost", ["--minutes", "0.1", "--interval", "1"], "CPU seconds per hour"),
    ("bench_gpu_cycle", [], "steady cycle: 120 calls (15.0 per GPU)"),
    ("bench_hook", ["--rounds", "20"], "all_reduce (async + wait)"),
    ("bench_numerics", ["--values", "1000", "--rounds", "1"], "grad norm, a zero every 50 steps"),
    ("bench_hang_stack", ["--calls", "20"], "200 frames deep"),
    ("bench_fs", ["--cycles", "20"], "3 Lustre mounts x 7 OSCs"),
    ("bench_ingest", ["--rates", "1000"], "offered/s"),
    ("bench_owners", ["--refreshes", "5"], "8 of 100 pods hold GPUs"),
    ("bench_flood", ["--seconds", "1", "--idle", "200", "--flood", "200", "--settle", "0.2"], "flood answers"),
    ("bench_auth_flood", ["--scrapes", "5", "--clients", "8", "--cost", "4"], "wrong-password clients"),
    ("bench_soak", ["--minutes", "0.1", "--ranks", "16"], "live ranks"),
    ("bench_nccl_cardinality", ["--ranks", "16", "--comms", "2"], "nccl_inspector total"),
])
def test_benchmark_prints_its_table(bench: str, args: list[str], expected: str) -> None:
    assert_prints_table(bench, args, expected)


def assert_prints_table(bench: str, args: list[str], expected: str) -> None:
    require_tool("gcc")
    require_tool("prometheus-node-exporter", "node_exporter")

    result = subprocess.run([sys.executable, "-m", f"tests.bench.{bench}", *args], cwd=REPO, capture_output=True,
                            text=True, timeout=300)

    assert 0 == result.returncode, result.stderr[-2000:]
    assert expected in result.stdout
