from __future__ import annotations

from tests.helpers.fs_trees import LUSTRE_SAMPLE
from trainmon.parsers import lustre


def test_lustre_stats_counters_with_and_without_sums() -> None:
    stats = lustre.parse_stats((LUSTRE_SAMPLE / "llite" / "lustrefs-ffff88105db50000" / "stats").read_text())

    assert not isinstance(stats, str)
    assert 93813797294080 == stats["write_bytes"].sum
    assert 136 == stats["open"].samples
    assert stats["open"].sum is None


def test_lustre_stats_cut_in_a_line_is_refused() -> None:
    assert "is not" in str(lustre.parse_stats("snapshot_time 1.2 secs.nsecs\nread_bytes 1 samples [bytes] 4194304 41"))
    assert "no snapshot_time line" == lustre.parse_stats("")


def test_lustre_import_rpcs() -> None:
    text = (LUSTRE_SAMPLE / "osc" / "lustrefs-OST0000-osc-ffff88105db50000" / "import").read_text()
    rpcs = lustre.parse_import(text)

    assert not isinstance(rpcs, str)
    assert (8, 0) == (rpcs.inflight, rpcs.timeouts)
    assert "no rpcs: section" == lustre.parse_import(text.replace("rpcs:", "rpc:"))
    assert lustre.ImportRpcs(None, 0) == lustre.parse_import(text.replace("inflight:", "in_flight:"))
    assert "rpcs: section without timeouts" == lustre.parse_import(text.replace("timeouts:", "timeout:"))


def test_lustre_import_rpcs_section_ends_at_the_next_section() -> None:
    text = "import:\n    rpcs:\n       inflight: 3\n    transactions:\n       timeouts: 9\n"

    assert "rpcs: section without timeouts" == lustre.parse_import(text)


def test_lustre_rpc_stats_in_flight() -> None:
    text = (LUSTRE_SAMPLE / "osc" / "lustrefs-OST0000-osc-ffff88105db50000" / "rpc_stats").read_text()

    assert 6 == lustre.parse_rpc_stats(text)  # 0 read + 6 write
    assert 9 == lustre.parse_rpc_stats(text.replace("read RPCs in flight:  0", "read RPCs in flight:  3"))
    assert "no snapshot_time: line" == lustre.parse_rpc_stats("garbage")
    assert "no `read RPCs in flight:` and `write RPCs in flight:` counts" == \
        lustre.parse_rpc_stats(text.replace("write RPCs in flight: 6", "write RPCs in flight: x"))


def test_lustre_names() -> None:
    assert ("lustrefs", "ffff88105db50000") == lustre.llite_instance("lustrefs-ffff88105db50000")
    assert ("lustrefs", "ffff88105db50000") == lustre.osc_instance("lustrefs-OST0000-osc-ffff88105db50000")
    assert lustre.osc_instance("lustrefs-OST0000-osc-MDT0000") is None  # a server's OSC
    assert "lustrefs" == lustre.fsname_of_source("10.0.0.1@o2ib:10.0.0.2@o2ib:/lustrefs")
    assert lustre.fsname_of_source("lustrefs") is None


def test_a_5000_digit_value_is_refused_not_raised() -> None:
    """int() raises ValueError past 4,300 digits: such a file is garbage, said as the others are."""
    huge = "9" * 5000
    osc = LUSTRE_SAMPLE / "osc" / "lustrefs-OST0000-osc-ffff88105db50000"

    assert "over 64 bits" in str(lustre.parse_stats(f"snapshot_time 1.2 secs.nsecs\nopen {huge} samples [regs]\n"))
    assert "rpcs: section without timeouts" == lustre.parse_import(
        (osc / "import").read_text().replace("timeouts: 0", f"timeouts: {huge}"))
    assert "no `read RPCs in flight:`" in str(lustre.parse_rpc_stats(
        (osc / "rpc_stats").read_text().replace("read RPCs in flight:  0", f"read RPCs in flight:  {huge}")))
