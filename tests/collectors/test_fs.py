from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers.catalog import assert_declared
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.fs_trees import PID, add_nfs_mounts, build_fs_tree, nfs4_block, nfs_mount_line
from tests.helpers.metrics import parse_samples, registry_of
from tests.helpers.node_exporter import node_exporter
from tests.helpers.tools import require_tool
from tests.helpers.trees import replace_with_fifo
from trainmon.catalog import fs as fs_catalog
from trainmon.collectors import fs
from trainmon.collectors.base import Collection, NodeResources
from trainmon.collectors.fs import MAX_MOUNTS, FsCollector
from trainmon.errors import NoData
from trainmon.fsclients.nfs import NFS_OPERATIONS
from trainmon.settings import Settings

LUSTRE = "/lustre/lustrefs"
NFS = "/mnt/nfs/test"


def collect(proc: Path, system: Path, **settings: object) -> Collection:
    return FsCollector(Settings(procfs=proc, sysfs=system, **settings), NodeResources()).collect()  # type: ignore[arg-type]


def value(collection: Collection, name: str, **labels: str) -> float | None:
    return registry_of(collection.families).get_sample_value(f"trainmon_fs_{name}", labels)


@pytest.mark.parametrize("layout", ["procfs", "debugfs"])
def test_lustre_values_per_mount_from_either_layout(layout: str, tmp_path: Path) -> None:
    """The sample client (Lustre 2.10) summed over its seven OSCs, the same from the 2.12+ layout."""
    result = collect(*build_fs_tree(tmp_path, nfs=False, layout=layout))

    assert 1 == value(result, "info", mount=LUSTRE, fstype="lustre",
                      source="172.20.20.5@o2ib:172.20.20.6@o2ib:/lustrefs")
    assert 4194304 == value(result, "read_bytes_total", mount=LUSTRE)
    assert 93813797294080 == value(result, "written_bytes_total", mount=LUSTRE)
    assert 89467810 == value(result, "operations_total", mount=LUSTRE, op="write")
    assert 136 == value(result, "operations_total", mount=LUSTRE, op="open")
    assert 0 == value(result, "operations_total", mount=LUSTRE, op="statfs")  # not printed yet: 0, not absent
    assert 8 == value(result, "rpcs_in_flight", mount=LUSTRE)  # OST0000's import; the others have none
    assert 0 == value(result, "rpc_timeouts_total", mount=LUSTRE)
    rpcs, seconds = value(result, "rpcs_total", mount=LUSTRE), value(result, "rpc_seconds_total", mount=LUSTRE)
    assert rpcs is not None
    assert seconds is not None
    assert 18215581 < rpcs
    assert 0.0001 < seconds / rpcs < 0.01  # req_waittime is microseconds: ~6 ms per RPC in the sample
    assert () == result.skipped
    assert [f"{LUSTRE}: lustre 172.20.20.5@o2ib:172.20.20.6@o2ib:/lustrefs, llite lustrefs-ffff881000000000, "
            "7 OSCs"] == list(result.found)
    assert {family.name for family in fs_catalog.FAMILIES} == assert_declared(result.families, "fs")


def test_three_lustre_mounts_each_get_their_own_oscs(tmp_path: Path) -> None:
    result = collect(*build_fs_tree(tmp_path, lustre=("alpha", "beta", "gamma"), nfs=False))
    rpcs = {m: value(result, "rpcs_total", mount=f"/lustre/{m}") for m in ("alpha", "beta", "gamma")}

    assert len(set(rpcs.values())) == 1
    assert None not in rpcs.values()
    assert 8 == value(result, "rpcs_in_flight", mount="/lustre/beta")


def test_nfs_values_from_the_sample_mountstats(tmp_path: Path) -> None:
    result = collect(*build_fs_tree(tmp_path, lustre=()))

    assert 1207640230 == value(result, "read_bytes_total", mount=NFS)  # normal 1207640230 + direct 0
    assert 1298 == value(result, "operations_total", mount=NFS, op="read")
    assert 2927395007 == value(result, "operations_total", mount=NFS, op="access")
    assert 1298 + 2927395007 == value(result, "rpcs_total", mount=NFS)
    assert pytest.approx((79407 + 1953587717) / 1000) == value(result, "rpc_seconds_total", mount=NFS)
    assert value(result, "rpcs_in_flight", mount=NFS) is None  # NFS does not count it: absent, not 0
    assert set(NFS_OPERATIONS.values()) == {s.labels["op"] for f in result.families for s in f.samples
                                            if s.name == "trainmon_fs_operations_total"}
    assert {family.name for family in fs_catalog.FAMILIES} - {fs_catalog.FS_RPCS_IN_FLIGHT.name} == assert_declared(
        result.families, "fs")


def test_local_file_systems_get_nothing_and_a_node_without_network_mounts_has_no_data(tmp_path: Path) -> None:
    proc, system = build_fs_tree(tmp_path, lustre=(), nfs=False)

    with pytest.raises(NoData, match="no network or parallel file-system mounts"):
        collect(proc, system)


def test_the_mount_filter(tmp_path: Path) -> None:
    result = collect(*build_fs_tree(tmp_path, lustre=("alpha", "beta")), fs_mounts=re.compile(r"^/lustre/b"))

    assert {"/lustre/beta"} == {s.labels["mount"] for f in result.families for s in f.samples}


def test_a_garbage_llite_stats_drops_that_mounts_bytes_and_is_listed(tmp_path: Path) -> None:
    proc, system = build_fs_tree(tmp_path, lustre=("alpha", "beta"))
    (proc / "fs/lustre/llite/alpha-ffff881000000000/stats").write_text(
        "snapshot_time 1510950459.772792457 secs.nsecs\nread_bytes 1 samples [bytes] 4194304 41\x00\x00")

    result = collect(proc, system)

    assert value(result, "read_bytes_total", mount="/lustre/alpha") is None
    assert value(result, "operations_total", mount="/lustre/alpha", op="open") is None
    assert value(result, "rpcs_total", mount="/lustre/alpha") is not None  # the OSC files were fine
    assert 4194304 == value(result, "read_bytes_total", mount="/lustre/beta")
    (note,) = result.skipped
    assert note.startswith("/lustre/alpha: llite/alpha-ffff881000000000/stats: line 'read_bytes 1 samples")


def test_one_garbage_osc_import_drops_the_sum_not_just_that_osc(tmp_path: Path) -> None:
    """A sum over six of seven OSCs would look like a counter reset."""
    proc, system = build_fs_tree(tmp_path, nfs=False)
    (proc / "fs/lustre/osc/lustrefs-OST0003-osc-ffff881000000000/import").write_text("import:\n    name: x\n")

    result = collect(proc, system)

    assert value(result, "rpc_timeouts_total", mount=LUSTRE) is None
    assert 8 == value(result, "rpcs_in_flight", mount=LUSTRE)  # OST0003's from its rpc_stats instead
    assert value(result, "rpcs_total", mount=LUSTRE) is not None
    assert [f"{LUSTRE}: osc/lustrefs-OST0003-osc-ffff881000000000/import: no rpcs: section"] == list(result.skipped)


def test_an_osc_import_without_in_flight_takes_it_from_rpc_stats(tmp_path: Path) -> None:
    """OST0000's import says 8 in flight, its rpc_stats 0 read + 6 write: the sum shows which was read."""
    proc, system = build_fs_tree(tmp_path, nfs=False)
    osc = proc / "fs/lustre/osc/lustrefs-OST0000-osc-ffff881000000000"
    (osc / "import").write_text((osc / "import").read_text().replace("       inflight: 8\n", ""))

    result = collect(proc, system)

    assert 6 == value(result, "rpcs_in_flight", mount=LUSTRE)
    assert 0 == value(result, "rpc_timeouts_total", mount=LUSTRE)  # the import's other counts still count
    assert () == result.skipped


def test_garbage_import_and_rpc_stats_of_one_osc_drop_the_in_flight_sum(tmp_path: Path) -> None:
    proc, system = build_fs_tree(tmp_path, nfs=False)
    osc = proc / "fs/lustre/osc/lustrefs-OST0005-osc-ffff881000000000"
    (osc / "import").write_text("garbage\n")
    (osc / "rpc_stats").write_text("snapshot_time: 1510950459.787901292 (secs.nsecs)\nread RPCs in fli")

    result = collect(proc, system)

    assert value(result, "rpcs_in_flight", mount=LUSTRE) is None
    assert value(result, "rpc_timeouts_total", mount=LUSTRE) is None
    assert [f"{LUSTRE}: osc/lustrefs-OST0005-osc-ffff881000000000/import: no rpcs: section",
            f"{LUSTRE}: osc/lustrefs-OST0005-osc-ffff881000000000/rpc_stats: no `read RPCs in flight:` and "
            "`write RPCs in flight:` counts"] == list(result.skipped)


def test_unreadable_debugfs_stats_say_what_they_need(tmp_path: Path) -> None:
    """A non-root DaemonSet on 2.12+: debugfs is root's; what is readable elsewhere is still served."""
    proc, system = build_fs_tree(tmp_path, nfs=False, layout="debugfs")
    stats = system / "kernel/debug/lustre/llite/lustrefs-ffff881000000000/stats"
    stats.unlink()
    stats.symlink_to(tmp_path / "nowhere")  # root reads a chmod 000 file: a dangling link is unreadable to all
    shutil.rmtree(system / "kernel/debug/lustre/osc")

    result = collect(proc, system)

    assert 8 == value(result, "rpcs_in_flight", mount=LUSTRE)  # import is in procfs
    assert value(result, "read_bytes_total", mount=LUSTRE) is None
    assert value(result, "rpcs_total", mount=LUSTRE) is None
    assert f"{LUSTRE}: llite/lustrefs-ffff881000000000/stats: ENOENT" in result.skipped
    assert 8 == len(result.skipped)


def test_a_truncated_nfs_block_drops_that_mount_and_keeps_the_others(tmp_path: Path) -> None:
    proc, system = build_fs_tree(tmp_path)
    mountstats = proc / PID / "mountstats"
    mountstats.write_text(mountstats.read_text().split("per-op statistics")[0])

    result = collect(proc, system)

    assert value(result, "read_bytes_total", mount=NFS) is None
    assert 1 == value(result, "info", mount=NFS, fstype="nfs4", source="192.168.1.1:/srv/test")
    assert value(result, "read_bytes_total", mount=LUSTRE) is not None
    assert [f"{NFS}: self/mountstats: no per-op statistics (truncated?)"] == list(result.skipped)


def test_a_5000_digit_counter_drops_only_what_it_feeds(tmp_path: Path) -> None:
    """int() raises past 4,300 digits: each such value drops its own mount's series, never the collector."""
    proc, system = build_fs_tree(tmp_path, lustre=("alpha", "beta"))
    add_nfs_mounts(proc, ["/mnt/good"])
    add_nfs_mounts(proc, ["/mnt/huge"], first_id=2000)
    mountstats = proc / PID / "mountstats"
    huge = "9" * 5000
    head, _, tail = mountstats.read_text().rpartition("\tbytes:\t1048576 ")
    mountstats.write_text(f"{head}\tbytes:\t{huge} {tail}")
    llite = proc / "fs/lustre/llite/alpha-ffff881000000000/stats"
    llite.write_text(llite.read_text().replace("read_bytes                1 samples", f"read_bytes {huge} samples"))
    osc_import = proc / "fs/lustre/osc/beta-OST0001-osc-ffff881000000001/import"
    osc_import.write_text(re.sub(r"timeouts: \d+", f"timeouts: {huge}", osc_import.read_text()))

    result = collect(proc, system)

    assert value(result, "read_bytes_total", mount="/mnt/huge") is None
    assert 1048576 == value(result, "read_bytes_total", mount="/mnt/good")
    assert 1207640230 == value(result, "read_bytes_total", mount=NFS)
    assert value(result, "read_bytes_total", mount="/lustre/alpha") is None
    assert value(result, "rpc_timeouts_total", mount="/lustre/beta") is None
    assert 4194304 == value(result, "read_bytes_total", mount="/lustre/beta")
    for prefix in ("/lustre/alpha: llite/", "/lustre/beta: osc/beta-OST0001", "/mnt/huge: self/mountstats: bytes:"):
        assert any(note.startswith(prefix) for note in result.skipped), (prefix, result.skipped)


def test_a_mount_point_holding_line_separators_other_than_newline_is_one_mount(tmp_path: Path) -> None:
    """The kernel ends lines with "\\n" only and escapes only space, tab, newline and backslash: U+2028, NEL,
    VT and FF stay in the mount point, which str.splitlines() would cut into pieces."""
    point = "/mnt/a\u2028b\x85c\x0bd\x0ce\u2029f\x1cg"
    proc, system = build_fs_tree(tmp_path, lustre=())
    add_nfs_mounts(proc, [point, "/mnt/after"])

    result = collect(proc, system)

    assert 1048576 == value(result, "read_bytes_total", mount=point)
    assert 1048576 == value(result, "read_bytes_total", mount="/mnt/after")
    assert {NFS, point, "/mnt/after"} == {s.labels["mount"] for f in result.families for s in f.samples}
    assert () == result.skipped


def test_a_thousand_nfs_mounts_all_get_counters_and_more_are_capped_and_noted(tmp_path: Path) -> None:
    """1,000 NFSv4.2 mounts make a ~5 MiB mountstats: each is served; the mounts after MAX_MOUNTS are not,
    and a note says how many."""
    proc, system = build_fs_tree(tmp_path, lustre=(), nfs=False)
    add_nfs_mounts(proc, [f"/mnt/home{n}" for n in range(MAX_MOUNTS + 5)])
    assert (proc / PID / "mountstats").stat().st_size > 4 << 20

    result = collect(proc, system)

    served = {s.labels["mount"] for f in result.families for s in f.samples if s.name == "trainmon_fs_read_bytes_total"}
    assert {f"/mnt/home{n}" for n in range(MAX_MOUNTS)} == served
    assert (f"5 network mounts after the first {MAX_MOUNTS} not served (--fs-mounts selects which)",) == result.skipped


def test_mounts_listed_after_the_part_of_mountstats_read_are_noted(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the first MOUNTSTATS_BYTES are read: the blocks wholly inside them count, the rest are noted."""
    proc, system = build_fs_tree(tmp_path, lustre=(), nfs=False)
    add_nfs_mounts(proc, [f"/mnt/home{n}" for n in range(10)])
    block = len(nfs4_block("/mnt/home0").encode())
    monkeypatch.setattr(fs, "MOUNTSTATS_BYTES", 4 * block + block // 2)

    result = collect(proc, system)

    served = {s.labels["mount"] for f in result.families for s in f.samples if s.name == "trainmon_fs_read_bytes_total"}
    assert {f"/mnt/home{n}" for n in range(4)} == served
    assert [f"/mnt/home{n}: listed after the first {4 * block + block // 2:,} bytes of self/mountstats (not read)"
            for n in range(4, 10)] == sorted(result.skipped)


def test_a_mount_that_disappears_takes_its_series_with_it(tmp_path: Path) -> None:
    proc, system = build_fs_tree(tmp_path)
    collector = FsCollector(Settings(procfs=proc, sysfs=system), NodeResources())
    assert any(s.labels.get("mount") == NFS for f in collector.collect().families for s in f.samples)
    mountinfo = proc / PID / "mountinfo"
    mountinfo.write_text(mountinfo.read_text().replace(nfs_mount_line(NFS), ""))

    mounts = {s.labels["mount"] for f in collector.collect().families for s in f.samples}

    assert {LUSTRE} == mounts


def test_an_ost_added_while_mounted_is_summed_at_the_next_cycle(tmp_path: Path) -> None:
    """The grouping of OSCs per mount is reused only while the directory listing is the same."""
    proc, system = build_fs_tree(tmp_path, nfs=False)
    collector = FsCollector(Settings(procfs=proc, sysfs=system), NodeResources())
    seven = value(collector.collect(), "rpcs_total", mount=LUSTRE)
    oscs = proc / "fs/lustre/osc"
    shutil.copytree(oscs / "lustrefs-OST0000-osc-ffff881000000000", oscs / "lustrefs-OST0007-osc-ffff881000000000")

    result = collector.collect()

    assert seven is not None
    assert 18215581 + seven == value(result, "rpcs_total", mount=LUSTRE)  # OST0000's req_waittime count again
    assert 16 == value(result, "rpcs_in_flight", mount=LUSTRE)
    assert result.found[0].endswith("8 OSCs")


def test_mountstats_as_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    """Only the client's counter files are read, opened non-blocking: a FIFO cannot hang the cycle."""
    proc, system = build_fs_tree(tmp_path)
    replace_with_fifo(proc / PID / "mountstats")

    result = collect(proc, system)

    assert [f"{NFS}: self/mountstats: not a regular file"] == list(result.skipped)
    assert value(result, "read_bytes_total", mount=LUSTRE) is not None


def test_check_lists_the_mounts_and_what_was_skipped(tmp_path: Path) -> None:
    proc, system = build_fs_tree(tmp_path, nfs=False, layout="debugfs")
    shutil.rmtree(system / "kernel/debug/lustre/llite")
    done = subprocess.run([sys.executable, "-m", "trainmon", "check", "--collectors", "fs", "--procfs", str(proc),
                           "--sysfs", str(system)], capture_output=True, text=True, timeout=60)

    assert 0 == done.returncode, done.stdout + done.stderr
    assert f"    {LUSTRE}: lustre 172.20.20.5@o2ib:172.20.20.6@o2ib:/lustrefs\n" in done.stdout  # no llite: no OSCs
    assert f"skipped: {LUSTRE}: no llite instance of file system 'lustrefs'" in done.stdout


def test_the_daemon_lists_a_broken_file_in_its_status(tmp_path: Path, daemons: list[Daemon]) -> None:
    proc, system = build_fs_tree(tmp_path)
    (proc / "fs/lustre/osc/lustrefs-OST0001-osc-ffff881000000000/stats").write_text("garbage\n")
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "fs", "--procfs", str(proc),
                                                     "--sysfs", str(system)]))

    (fs,) = [c for c in daemon.get("/api/v1/status").json()["collectors"] if c["name"] == "fs"]
    samples = parse_samples(daemon.metrics_text())

    assert fs["ok"]
    assert [f"{LUSTRE}: osc/lustrefs-OST0001-osc-ffff881000000000/stats: no snapshot_time line"] == fs["skipped"]
    assert ("trainmon_fs_rpcs_total", frozenset({("mount", LUSTRE)})) not in samples
    assert ("trainmon_fs_rpcs_total", frozenset({("mount", NFS)})) in samples


def test_nfs_values_equal_node_exporters_mountstats(tmp_path: Path, daemons: list[Daemon]) -> None:
    """Debian's node_exporter on the same tree: bytes (normal + direct), per-op requests, execute time, timeouts."""
    binary = require_tool("prometheus-node-exporter", "node_exporter")
    proc, system = build_fs_tree(tmp_path / "tree", lustre=())
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "fs", "--procfs", str(proc),
                                                     "--sysfs", str(system)]))
    with node_exporter(binary, proc, system, ("--collector.disable-defaults", "--collector.mountstats")) as url:
        theirs = parse_samples(httpx.get(url, timeout=10).text)
    ours = parse_samples(daemon.metrics_text())

    def node(name: str, operation: str | None = None) -> float:
        return sum(v for (n, labels), v in theirs.items() if n == f"node_mountstats_nfs_{name}"
                   and (operation is None or ("operation", operation) in labels))

    def mine(name: str, **labels: str) -> float:
        return ours[(f"trainmon_fs_{name}", frozenset({("mount", NFS), *labels.items()}))]

    assert node("read_bytes_total") > 0, "node_exporter read no NFS mount"
    assert node("read_bytes_total") + node("direct_read_bytes_total") == mine("read_bytes_total")
    assert node("write_bytes_total") + node("direct_write_bytes_total") == mine("written_bytes_total")
    assert node("operations_requests_total") == mine("rpcs_total")
    assert pytest.approx(node("operations_request_time_seconds_total")) == mine("rpc_seconds_total")
    assert node("operations_major_timeouts_total") == mine("rpc_timeouts_total")
    for kernel_name, op in NFS_OPERATIONS.items():
        if kernel_name in {"READ", "ACCESS", "WRITE"}:
            assert node("operations_requests_total", kernel_name) == mine("operations_total", op=op)
