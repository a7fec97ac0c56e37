"""bench_fleet still runs and prints its table, in both modes (a file of its own: see test_benches_run.py).
The smallest runs that still evaluate every rule group's expressions and the Fleet panels: two nodes, a
minute of data (or one scrape), nothing waited for; the benchmark's defaults are for measuring."""

from __future__ import annotations

import pytest

from tests.bench.test_benches_run import assert_prints_table

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("args", [
    ["--nodes", "2", "--minutes", "1", "--settle", "0", "--dashboards", "fleet", "--evaluations", "1", "--rounds", "1"],
    ["--mode", "scrape", "--nodes", "2", "--minutes", "0.1", "--dashboards", "fleet", "--evaluations", "1",
     "--rounds", "1"],
])
def test_bench_fleet_prints_its_table(args: list[str]) -> None:
    assert_prints_table("bench_fleet", args, "alone of interval")
