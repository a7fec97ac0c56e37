"""bench_fleet still runs and prints its table, in both modes (a file of its own: see test_benches_run.py)."""

from __future__ import annotations

import pytest

from tests.bench.test_benches_run import assert_prints_table

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("args", [
    ["--nodes", "2", "--minutes", "6", "--dashboards", "fleet", "--evaluations", "1"],
    ["--mode", "scrape", "--nodes", "2", "--minutes", "0.6", "--dashboards", "fleet", "--evaluations", "1"],
])
def test_bench_fleet_prints_its_table(args: list[str]) -> None:
    assert_prints_table("bench_fleet", args, "alone of interval")
