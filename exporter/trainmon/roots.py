"""Filesystem roots (`--procfs`, `--sysfs`) and the one way trainmon reads a kernel attribute."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from trainmon.errors import CollectorError

# Errors that mean "this attribute is not available here", not "the collector is broken":
# EINVAL from a ConnectX-7 VL15_dropped, EACCES from write-only files, EISDIR where a file was
# expected, and so on. The value is skipped; the caller records what was skipped.
UNAVAILABLE = frozenset({
    errno.ENOENT, errno.EACCES, errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP, errno.EAGAIN,
    errno.EISDIR, errno.ENODEV, errno.ENXIO, errno.EIO, errno.ENOTDIR, errno.ELOOP,
    errno.ESRCH,  # /proc/<pid>/... of a process that exited while it was read
})
PAGE_BYTES = 4096  # what the kernel lets one sysfs attribute hold
DISKSTATS_BYTES = 4 << 20  # /proc/diskstats grows with the block devices: ~25,000 lines of ~160 bytes
MAX_NAME_CHARS = 256  # a model, serial or board id becomes a label value (an OmniPath board_id is 73)
_CHUNK_BYTES = 64 << 10  # procfs hands out about a page per read(); never allocate the whole limit at once


@dataclass(frozen=True, slots=True)
class Unavailable:
    """Why an attribute has no value here: an errno name, "not a regular file", "over 4096 bytes"."""

    why: str

    @property
    def missing(self) -> bool:
        return self.why == "ENOENT"


@dataclass(frozen=True, slots=True)
class Root:
    """A mount point such as /proc or /sys; every path the collectors read is joined from one.

    `flag` names the command-line option that sets it, so a root that is not there says how to fix it.
    """

    path: Path
    flag: str

    def join(self, *parts: str) -> Path:
        return self.path.joinpath(*parts)

    def require(self) -> None:
        """A missing root is a wrong flag, not a node without the hardware: fail, naming the flag."""
        if not self.path.is_dir():
            raise CollectorError(f"--{self.flag} {self.path}: not a directory (point --{self.flag} at the "
                                 f"host's {'/proc' if self.flag == 'procfs' else '/sys'})")


def read_attribute(path: str | Path, limit: int = PAGE_BYTES) -> str | Unavailable:
    """A sysfs or procfs file's text, stripped, or why it has none.

    Opened with O_NONBLOCK and read only if it is a regular file, so a FIFO or a device planted in
    the tree cannot block the collector; more than `limit` bytes is not a value but garbage. A sysfs
    attribute comes whole from one read(); a procfs file allowed more than a page (diskstats) comes a
    page or so per read(), so it is read on to its end.

    Raises:
        OSError: an error that means the collector itself is broken (EMFILE, ENOMEM), not the value absent.
    """
    data = _read_bytes(path, limit)
    return data if isinstance(data, Unavailable) else _whole_text(data, limit)


def read_owned_file(path: str | Path, limit: int, owners: frozenset[int]) -> str | Unavailable:
    """`read_attribute` for a file outside procfs and sysfs that only `owners` (uids) may have written: a
    symbolic link is not followed (`ELOOP`), and a file of another owner is not read."""
    data = _read_bytes(path, limit, os.O_NOFOLLOW, owners)
    return data if isinstance(data, Unavailable) else _whole_text(data, limit)


def read_prefix(path: str | Path, limit: int) -> tuple[str, bool] | Unavailable:
    """The first `limit` bytes of a procfs file read as `read_attribute` reads it (not stripped), and whether
    there was more: for a file of records (mountstats) whose first ones are still worth reading."""
    data = _read_bytes(path, limit)
    if isinstance(data, Unavailable):
        return data
    return data[:limit].decode(errors="replace"), len(data) > limit


def _whole_text(data: bytes, limit: int) -> str | Unavailable:
    if len(data) > limit:
        return Unavailable(f"over {limit} bytes")
    return data.decode(errors="replace").strip()


def _read_bytes(path: str | Path, limit: int, flags: int = 0,
                owners: frozenset[int] | None = None) -> bytes | Unavailable:
    """Up to `limit + 1` bytes of a regular file (one more tells that there is more), or why none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | flags)
    except OSError as exc:
        return _unavailable(exc)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return Unavailable("EISDIR" if stat.S_ISDIR(info.st_mode) else "not a regular file")
        if owners is not None and info.st_uid not in owners:
            return Unavailable(f"owned by uid {info.st_uid}, not by uid {' or '.join(map(str, sorted(owners)))}")
        data = os.read(fd, min(_CHUNK_BYTES, limit + 1))
        if limit > PAGE_BYTES:
            chunks, size = [data], len(data)
            while data and size <= limit:
                data = os.read(fd, min(_CHUNK_BYTES, limit + 1 - size))
                chunks.append(data)
                size += len(data)
            data = b"".join(chunks)
    except OSError as exc:
        return _unavailable(exc)
    finally:
        os.close(fd)
    return data


def read_name(path: str | Path) -> str | Unavailable:
    """An attribute that becomes a label value: printable text of at most `MAX_NAME_CHARS`, or why not."""
    value = read_attribute(path)
    if isinstance(value, str) and (len(value) > MAX_NAME_CHARS or not value.isprintable()):
        return Unavailable(f"not a name {value[:40]!r}")
    return value


def list_directory(path: str | Path) -> list[str] | Unavailable:
    """A sysfs directory's entries, sorted, or why it has none (same errors as `read_attribute`)."""
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return _unavailable(exc)


def _unavailable(exc: OSError) -> Unavailable:
    if exc.errno not in UNAVAILABLE:
        raise exc
    return Unavailable(errno.errorcode.get(exc.errno or 0, str(exc)))
