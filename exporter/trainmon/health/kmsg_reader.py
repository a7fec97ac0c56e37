"""Reads the kernel log for XIDs: the whole ring buffer at start, then follows it in a thread.

`/dev/kmsg` gives one record per read and EAGAIN at the end (opened non-blocking); EPIPE means
records were overwritten before we read them (counted as lost, reading goes on). A regular file
(tests, a saved log) is read the same way and followed like `tail -f`. Nothing here runs during a
scrape: the collector only takes `snapshot()`. While the log is readable it is the one source of XID
counts; when it fails, NVML events take over (`XidCounts.kmsg_unreadable`).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainmon.health.catalog import Action
from trainmon.health.nvlink5 import nvlink5_action
from trainmon.nvml.xid import Source, XidCounts, XidKey
from trainmon.parsers.kmsg import XidParser, split_record

log = logging.getLogger(__name__)

READ_SIZE = 16384  # larger than any kmsg record (the kernel caps them near 1 KiB)
MAX_PARTIAL = 65536  # an unterminated line longer than this is dropped as truncated
IDLE_SECONDS = 0.25  # how long the thread sleeps when the log has nothing new
MAX_XID = 1000  # NVIDIA's codes are below this; anything larger is a garbled line


@dataclass(frozen=True, slots=True)
class KmsgStatus:
    """What the reader did so far; `error` says why the kernel log cannot be read (then NVML events alone)."""

    path: str
    readable: bool
    error: str
    records: int
    xids: int
    malformed: int
    lost: int


def boot_time() -> float:
    """Unix time of boot as /dev/kmsg timestamps count it (CLOCK_MONOTONIC)."""
    return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)


def why_unreadable(path: Path, exc: OSError) -> str:
    if exc.errno in (errno.EPERM, errno.EACCES):
        return (f"{path}: {exc.strerror} (run as root or with CAP_SYSLOG, or lower kernel.dmesg_restrict; "
                f"--kmsg names another file)")
    return f"{path}: {exc.strerror or exc} (--kmsg names the kernel log)"


class KmsgReader:
    """Counts every XID of the kernel log into `counts` (shared with the NVML event thread)."""

    def __init__(self, path: Path, counts: XidCounts, boot: Callable[[], float] = boot_time,
                 now: Callable[[], float] = time.time) -> None:
        self._path = path
        self._counts = counts
        self._boot = boot
        self._now = now
        self._parser = XidParser()
        self._partial = b""
        self._overlong = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd: int | None = None
        self._error = ""
        self._records = self._xids = self._lost = self._garbled = 0

    def start(self) -> None:
        """Open the log and read what it holds now (so the first collection has the history), then follow."""
        try:
            self._fd = os.open(self._path, os.O_RDONLY | os.O_NONBLOCK)
            self._catch_up()
        except OSError as exc:
            self._fail(exc)
            return
        self._thread = threading.Thread(target=self._follow, name="trainmon-kmsg", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * IDLE_SECONDS + 1)
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def status(self) -> KmsgStatus:
        with self._lock:
            return KmsgStatus(path=str(self._path), readable=self._fd is not None, error=self._error,
                              records=self._records, xids=self._xids,
                              malformed=self._parser.malformed + self._garbled, lost=self._lost)

    def _fail(self, exc: OSError) -> None:
        self._error = why_unreadable(self._path, exc)
        log.warning("kernel log unreadable, XIDs from NVML events only: %s", self._error)
        self._counts.kmsg_unreadable()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                more = self._catch_up()
            except OSError as exc:
                with self._lock:
                    self._fail(exc)
                return
            if not more:
                self._stop.wait(IDLE_SECONDS)

    def _catch_up(self) -> bool:
        """Read to the end of the log, which then holds the XIDs of the NVML events that arrived before."""
        arrivals = self._counts.nvml_arrivals()
        more = self.read_available()
        if not self._stop.is_set():
            self._counts.kmsg_read_past(arrivals)
        return more

    def read_available(self) -> bool:
        """Read until the log has nothing new; True if anything was read."""
        read_any = False
        while not self._stop.is_set():
            with self._lock:
                if self._fd is None:
                    return read_any
                try:
                    chunk = os.read(self._fd, READ_SIZE)
                except BlockingIOError:
                    return read_any
                except BrokenPipeError:  # the ring buffer overwrote records before we read them
                    self._lost += 1
                    continue
                if not chunk:
                    return read_any
                read_any = True
                self._consume(chunk)
        return read_any

    def _consume(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if self._overlong and lines:  # the rest of a dropped line is no record of its own
            lines.pop(0)
            self._overlong = False
        if len(self._partial) > MAX_PARTIAL:
            self._garbled += not self._overlong
            self._partial = b""
            self._overlong = True
        boot = self._boot()
        for raw in lines:
            record = split_record(raw.decode("utf-8", "replace"))
            if record is None:
                continue
            self._records += 1
            xid = self._parser.feed(record)
            if xid is None:
                continue
            if not 0 < xid.xid < MAX_XID:
                self._garbled += 1
                continue
            at = boot + xid.seconds if xid.seconds is not None else self._now()
            actionable = xid.nvlink5 is None or nvlink5_action(xid.xid, xid.nvlink5) != Action.NONE
            self._xids += self._counts.record(XidKey(xid.bus, xid.xid), at, Source.KMSG, actionable=actionable)
