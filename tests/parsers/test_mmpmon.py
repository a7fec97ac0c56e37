from __future__ import annotations

from tests.helpers.fs_trees import FIXTURES
from trainmon.parsers.mmpmon import parse_fs_io_s


def test_mmpmon_sample_and_a_failed_line() -> None:
    answer = parse_fs_io_s((FIXTURES / "gpfs" / "fs_io_s.txt").read_text() + "_fs_io_s_ _n_ x _rc_ 1 _fs_ bad\n")

    assert {"scratch", "project"} == set(answer.records)
    assert 2377656 == answer.records["scratch"].counters["_oc_"]
    assert ["mmpmon line 3 '_fs_io_s_ _n_ x _rc_ 1 _fs_ bad': _rc_ 1"] == answer.skipped


def test_a_5000_digit_value_drops_its_line() -> None:
    sample = (FIXTURES / "gpfs" / "fs_io_s.txt").read_text()
    answer = parse_fs_io_s(sample.replace("_br_ ", "_br_ " + "9" * 5000, 1))

    assert 1 == len(answer.records)
    assert answer.skipped[0].endswith("a value that is not an unsigned 64-bit counter")
