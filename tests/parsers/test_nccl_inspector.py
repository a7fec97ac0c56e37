"""NCCL Inspector's textfile and JSON dump, from fixtures in the layout its source writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmon.parsers.nccl_inspector import RecordError, parse_record, parse_textfile, size_class

INSPECTOR = Path(__file__).parents[1] / "fixtures" / "nccl" / "inspector"
PROM = INSPECTOR / "prom" / "nccl_inspector_metrics_00000000-0000-0000-0000-000000000001.prom"


def test_a_textfile_becomes_one_window_per_bucket_with_size_classes_not_bucket_strings() -> None:
    read = parse_textfile(PROM.read_text())

    assert (0, 0) == (read.truncated, read.malformed)
    got = {(w.comm_name, w.collective, w.size_class): (w.bus_bandwidth, w.exec_seconds) for w in read.windows}
    assert (182.4e9, 2743e-6) == got[("DP Group 0", "all_reduce", ">=256MiB")]
    assert (8.75e9, 14e-6) == got[("TP Group 0", "all_reduce", "<64KiB")]
    assert ("PP Group 0", "send_recv", "<16MiB") in got
    assert {"v5.1"} == {w.version for w in read.windows}
    assert {"GPU1"} == {w.gpu for w in read.windows}


def test_a_comm_name_that_cannot_be_a_label_value_is_malformed() -> None:
    text = PROM.read_text().replace('comm_name="TP Group 0"', 'comm_name="TP\\tGroup\x07"')

    read = parse_textfile(text)

    assert 3 == read.malformed
    assert {"DP Group 0", "PP Group 0"} == {w.comm_name for w in read.windows}


def test_a_line_cut_short_is_skipped_and_counted() -> None:
    text = PROM.read_text()
    read = parse_textfile(text[: len(text) - 40])

    assert (1, 0) == (read.truncated, read.malformed)
    p2p = next(w for w in read.windows if w.collective == "send_recv")
    assert (45.5e9, None) == (p2p.bus_bandwidth, p2p.exec_seconds)  # its time line was the one cut
    assert 7 == len(read.windows)


@pytest.mark.parametrize(("size", "label"), [(0, "<64KiB"), (65535, "<64KiB"), (65536, "<1MiB"),
                                              ((16 << 20) - 1, "<16MiB"), (256 << 20, ">=256MiB")])
def test_size_classes(size: int, label: str) -> None:
    assert label == size_class(size)


def test_json_records_give_time_bytes_bandwidth_and_the_timing_source() -> None:
    ops = [parse_record(line) for line in (INSPECTOR / "json" / "gpu-node-07-pid4001.log").read_text().splitlines()]

    first = ops[0]
    assert (4001, "DP Group 0", "all_reduce", ">=256MiB", 256 << 20) == (
        first.pid, first.comm_name, first.collective, first.size_class, first.size_bytes)
    assert 2701e-6 == pytest.approx(first.exec_seconds)
    assert 182.5e9 == first.bus_bandwidth
    assert [True] * 7 + [False] == [op.gpu_timed for op in ops]


@pytest.mark.parametrize(("line", "reason"), [
    ('{"header":{"id":"0x1","comm_name":"x","rank":0', "malformed"),
    ('{"header":{},"metadata":{"inspector_output_format_version":"v3.1","pid":1},"coll_perf":{}}', "version"),
    ('{"header":{},"metadata":{"inspector_output_format_version":"v4.0","pid":1},"coll_perf":{"coll":"AllReduce"}}',
     "malformed"),
    ("[1, 2]", "malformed"),
    ('{"header":{"comm_name":"a\\u0007b"},"metadata":{"inspector_output_format_version":"v4.0","pid":1},'
     '"coll_perf":{"coll":"AllReduce","coll_msg_size_bytes":1,"coll_exec_time_us":1,"coll_busbw_gbs":1.0,'
     '"coll_timing_source":"kernel_gpu"}}', "malformed"),
])
def test_bad_records_are_refused_with_a_reason(line: str, reason: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_record(line)
    assert reason == caught.value.reason
