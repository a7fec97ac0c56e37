"""The health history's file: atomic replacement, a corrupt file reported and treated as empty, no directory."""

from __future__ import annotations

from pathlib import Path

from trainmon.health.history import GpuHistory, XidRecord
from trainmon.health.state_file import FILE_NAME, MAX_BYTES, StateFile, read_boot_id

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
    assert "larger than" in oversized.status().problem


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
