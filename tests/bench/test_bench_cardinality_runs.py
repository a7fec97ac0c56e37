"""bench_cardinality still runs and prints its table (a file of its own: see test_benches_run.py)."""

from __future__ import annotations

import pytest

from tests.bench.test_benches_run import assert_prints_table

pytestmark = pytest.mark.slow


def test_bench_cardinality_prints_its_table() -> None:
    assert_prints_table("bench_cardinality", ["--minimal", "--flood-ranks", "64", "--scrapes", "1"], "per GPU")
