"""The one reader of kernel files: bounded, non-blocking, regular files only, errors as values."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.helpers.trees import break_file_as_dangling_symlink, replace_with_fifo, write
from trainmon.errors import CollectorError
from trainmon.roots import PAGE_BYTES, Root, Unavailable, list_directory, read_attribute, read_name


def test_a_value_is_stripped_text(tmp_path: Path) -> None:
    assert "4: ACTIVE" == read_attribute(write(tmp_path / "state", "4: ACTIVE\n"))


def test_a_full_page_is_a_value_and_one_byte_more_is_not(tmp_path: Path) -> None:
    assert "7" * PAGE_BYTES == read_attribute(write(tmp_path / "page", "7" * PAGE_BYTES))
    assert Unavailable("over 4096 bytes") == read_attribute(write(tmp_path / "more", "7" * (PAGE_BYTES + 1)))


@pytest.mark.parametrize("writer", [False, True])
def test_a_fifo_is_not_read_and_does_not_block(tmp_path: Path, writer: bool) -> None:
    """With or without a process holding the other end, the answer comes at once."""
    fifo = tmp_path / "counter"
    replace_with_fifo(fifo)
    outcome: list[object] = []
    held = os.open(fifo, os.O_RDWR) if writer else None  # O_RDWR: a writer that never writes
    thread = threading.Thread(target=lambda: outcome.append(read_attribute(fifo)), daemon=True)
    thread.start()
    thread.join(timeout=20)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join()
    if held is not None:
        os.close(held)

    assert [Unavailable("not a regular file")] == outcome


def test_a_character_device_is_not_read(tmp_path: Path) -> None:
    os.symlink("/dev/zero", tmp_path / "zeros")

    assert Unavailable("not a regular file") == read_attribute(tmp_path / "zeros")


def test_what_is_not_there_is_unavailable_not_an_exception(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    break_file_as_dangling_symlink(tmp_path / "dangling")

    assert Unavailable("ENOENT") == read_attribute(tmp_path / "absent")
    assert read_attribute(tmp_path / "absent").missing  # type: ignore[union-attr]
    assert Unavailable("EISDIR") == read_attribute(tmp_path / "dir")
    assert Unavailable("ENOENT") == read_attribute(tmp_path / "dangling")
    assert Unavailable("ENOTDIR") == read_attribute(write(tmp_path / "file", "1") / "child")
    assert Unavailable("ENOENT") == list_directory(tmp_path / "absent")
    assert ["dangling", "dir", "file"] == list_directory(tmp_path)


def test_a_procfs_file_beyond_a_page_is_read_to_its_end() -> None:
    """/proc/kallsyms comes about 4 KB per read() (a seq_file), and is megabytes long."""
    whole = Path("/proc/kallsyms").read_text(errors="replace")
    assert len(whole) > 64 * PAGE_BYTES

    assert whole.strip() == read_attribute("/proc/kallsyms", limit=len(whole) + PAGE_BYTES)
    assert Unavailable(f"over {len(whole) // 2} bytes") == read_attribute("/proc/kallsyms", limit=len(whole) // 2)


def test_a_name_is_printable_and_short(tmp_path: Path) -> None:
    assert "SAMSUNG MZQL23T8HCLS-00A07" == read_name(write(tmp_path / "model", "SAMSUNG MZQL23T8HCLS-00A07   \n"))
    assert Unavailable("not a name 'a\\nb'") == read_name(write(tmp_path / "lines", "a\nb\n"))
    assert Unavailable("not a name " + repr("x" * 40)) == read_name(write(tmp_path / "long", "x" * 300))


def test_a_root_that_is_not_a_directory_names_its_flag(tmp_path: Path) -> None:
    Root(tmp_path, "sysfs").require()
    with pytest.raises(CollectorError, match=f"--procfs {tmp_path / 'proc'}: not a directory"):
        Root(tmp_path / "proc", "procfs").require()
