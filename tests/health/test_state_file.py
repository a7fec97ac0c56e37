"""The health history's file: atomic replacement, a corrupt file reported and treated as empty, no directory,
a FIFO in its place, and a failed write tried again."""

from __future__ import annotations

import os
import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.fake_nvml import scenario as scenarios
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.helpers.clock import Clock
from tests.helpers.daemon import Daemon, start_daemon
from trainmon.health.history import GpuHistory, XidRecord
from trainmon.health.state_file import FILE_NAME, MAX_BYTES, RETRY_SECONDS, StateFile, read_boot_id

GPUS = {"GPU-a": GpuHistory("boot-1", xids={119: XidRecord("boot-1", 1_800_000_000.0)})}


def test_a_first_start_makes_the_directory_and_a_restart_reads_what_was_saved(tmp_path: Path) -> None:
    directory = tmp_path / "var" / "lib" / "trainmon"
    first = StateFile(directory)
    assert {} == first.load()
    first.save(GPUS)

    again = StateFile(directory)
    assert GPUS == again.load()
    assert (str(directory / FILE_NAME), True, "") == (again.status().path, again.status().persistent,
                                                      again.status().problem)
    assert [FILE_NAME] == [p.name for p in directory.iterdir()]  # no temporary file left behind
    assert 0o750 == directory.stat().st_mode & 0o777


def test_a_corrupt_or_oversized_file_is_reported_treated_as_empty_and_replaced(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text('{"version": 1, "gpus": {"GPU-a": ')
    state = StateFile(tmp_path)
    assert {} == state.load()
    assert state.status().persistent
    assert f"{tmp_path / FILE_NAME} unreadable at start, treated as empty" in state.status().problem

    state.save(GPUS)
    assert GPUS == StateFile(tmp_path).load()
    (tmp_path / FILE_NAME).write_bytes(b" " * (MAX_BYTES + 1))
    oversized = StateFile(tmp_path)
    assert {} == oversized.load()
    assert "over 1048576 bytes" in oversized.status().problem


def test_a_directory_that_cannot_be_made_keeps_the_history_in_memory_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    state = StateFile(tmp_path / "file" / "state")
    assert {} == state.load()
    state.save(GPUS)

    status = state.status()
    assert not status.persistent
    assert f"{tmp_path / 'file' / 'state'}: Not a directory" in status.problem
    assert "--state-dir" in status.problem
    assert not StateFile(None).status().persistent


def test_check_reads_the_file_and_never_writes_it(tmp_path: Path) -> None:
    StateFile(tmp_path).save(GPUS)
    before = (tmp_path / FILE_NAME).stat().st_mtime_ns
    reader = StateFile(tmp_path, read_only=True)
    assert GPUS == reader.load()
    reader.save({})

    assert before == (tmp_path / FILE_NAME).stat().st_mtime_ns
    missing = StateFile(tmp_path / "absent", read_only=True)
    assert {} == missing.load()
    assert not (tmp_path / "absent").exists()
    assert not missing.status().persistent


def test_the_boot_id_from_a_procfs_tree(tmp_path: Path) -> None:
    (tmp_path / "sys" / "kernel" / "random").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "random" / "boot_id").write_text("0f6e2c3a-1111-4c1b-9a6e-2a1d7f0e9b10\n")

    assert "0f6e2c3a-1111-4c1b-9a6e-2a1d7f0e9b10" == read_boot_id(tmp_path)
    assert read_boot_id(tmp_path / "absent") is None


def test_a_fifo_in_place_of_the_file_is_reported_and_never_waited_for(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / FILE_NAME)
    state = StateFile(tmp_path)

    assert {} == state.load()
    assert "unreadable at start, treated as empty and replaced (not a regular file)" in state.status().problem


def test_nesting_past_the_recursion_limit_is_a_corrupt_file(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("[" * 100_000)
    state = StateFile(tmp_path)

    assert {} == state.load()
    assert "unreadable at start, treated as empty and replaced (nested too deeply)" in state.status().problem


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Writes past `limit` bytes fail with EFBIG, as on a full disk (SIGXFSZ ignored: no core dump)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_failed_write_is_tried_again_with_back_off_until_it_succeeds(tmp_path: Path) -> None:
    clock = Clock(100.0)
    state = StateFile(tmp_path, clock=clock)
    state.load()
    with file_size_limit(16):
        state.save(GPUS)
        clock.now += RETRY_SECONDS
        state.flush()  # still full: the wait doubles

    status = state.status()
    assert not status.persistent
    assert f"{tmp_path}: File too large" in status.problem
    assert [] == [p.name for p in tmp_path.iterdir()]  # no temporary file left behind
    clock.now += 2 * RETRY_SECONDS - 1
    state.flush()
    assert not (tmp_path / FILE_NAME).exists()
    clock.now += 1
    state.flush()
    assert GPUS == StateFile(tmp_path).load()
    assert (True, "") == (state.status().persistent, state.status().problem)


def test_the_daemon_becomes_ready_beside_a_fifo_named_like_the_file(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                                    daemons: list[Daemon]) -> None:
    (tmp_path / "state").mkdir()
    os.mkfifo(tmp_path / "state" / FILE_NAME)
    scenario = scenarios.write(tmp_path / "scenario.json", scenarios.node(2))
    daemon = start_daemon(tmp_path, ["--collectors", "gpu", "--sysfs", str(tmp_path), "--kmsg", str(tmp_path / "kmsg"),
                                     "--state-dir", str(tmp_path / "state")],
                          env={"FAKE_NVML_SCENARIO": str(scenario), "LD_LIBRARY_PATH": str(fake_nvml_dir)})
    daemons.append(daemon)

    gpu = next(c for c in daemon.get("/api/v1/status").json()["collectors"] if c["name"] == "gpu")
    assert "treated as empty and replaced (not a regular file)" in gpu["details"]["health_state"]["problem"]
