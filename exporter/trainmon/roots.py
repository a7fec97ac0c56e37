"""Filesystem roots (`--procfs`, `--sysfs`) and the one way trainmon reads a kernel attribute."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

# Errors that mean "this attribute is not available here", not "the collector is broken":
# EINVAL from a ConnectX-7 VL15_dropped, EACCES from write-only files, EISDIR where a file was
# expected, and so on. The value is skipped; the caller records what was skipped.
UNAVAILABLE = frozenset({
    errno.ENOENT, errno.EACCES, errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP, errno.EAGAIN,
    errno.EISDIR, errno.ENODEV, errno.ENXIO, errno.EIO, errno.ENOTDIR,
})


@dataclass(frozen=True, slots=True)
class Root:
    """A mount point such as /proc or /sys; every path the collectors read is joined from one."""

    path: Path

    def join(self, *parts: str) -> Path:
        return self.path.joinpath(*parts)


def read_attr(path: str | Path) -> str:
    """Read a sysfs or procfs file with one bounded `read()` and no retry loop.

    Raises:
        OSError: the file could not be read; `errno in UNAVAILABLE` means the value is absent.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return os.read(fd, 1 << 16).decode(errors="replace").strip()
    finally:
        os.close(fd)


def read_text(path: Path) -> str:
    """Read a whole procfs file such as /proc/diskstats, which can exceed one page."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()
