"""XID errors from an NVML event set, read by a dedicated thread, and the ledger both XID sources share.

The XID event type is registered on its own: if any requested type is unsupported NVML
registers nothing. NVML events from before registration are lost (the kernel-log reader,
trainmon.health.kmsg_reader, has them). NVML re-initialisation invalidates the set, so the owner
stops the watcher before `nvmlShutdown` and starts a new one afterwards; the counts live in
`XidCounts`, which outlives every watcher.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

log = logging.getLogger(__name__)

WAIT_MS = 500  # nvmlEventSetWait timeout: how long `stop()` may wait for the thread
# (bus, xid) pairs kept for buses that are not this node's GPUs; a flood of distinct foreign or garbage codes
# cannot grow memory past it, and never takes the place of this node's own GPUs' pairs (never evicted, never capped).
MAX_KEYS = 4096
MAX_HELD = 1024  # NVML events kept until the kernel-log reader has read past them


class Source:
    NVML = "nvml"
    KMSG = "kmsg"


@dataclass(frozen=True, slots=True)
class XidKey:
    """An XID code on one PCI device, `bus` as the kernel log names it (`0000:18:00`)."""

    bus: str
    xid: int


@dataclass(frozen=True, slots=True)
class XidCount:
    key: XidKey
    count: int
    last_seen: float  # Unix time
    # The last occurrence that asks for the catalog's action: None when every one was a kind the catalog
    # ignores (a non-fatal NVLink5 error, which only the kernel log's line tells apart).
    last_actionable: float | None = None


@dataclass(frozen=True, slots=True)
class _Held:
    arrival: int  # the NVML event's number, in order of arrival
    key: XidKey
    at: float


@dataclass(frozen=True, slots=True)
class Watched:
    handle: Any
    bus: str


class XidCounts:
    """Thread-safe XID totals for the life of the process, each event once: one source counts at a time.

    While the kernel log is readable it alone counts; an NVML event is held until the reader has read
    past its arrival (the driver logs an XID as it raises the event, so the log has it by then), then
    dropped. Matching the two sources by time would count some events twice: the log's stamps run on the
    kernel's clock, which drifts from the wall clock over a long uptime. Once the log is unreadable
    (`kmsg_unreadable`, or `kernel_log=False` where there is none) NVML events count, the held ones
    first, so none is lost at the switch. Pairs of the buses `claim`ed as this node's GPUs are always
    kept; at most MAX_KEYS pairs of any other bus are.
    """

    def __init__(self, *, kernel_log: bool = True) -> None:
        self._lock = threading.Lock()
        self._counts: dict[XidKey, XidCount] = {}
        self._own: set[str] = set()
        self._foreign_keys = 0
        self._nvml_counts = not kernel_log
        self._held: deque[_Held] = deque(maxlen=MAX_HELD)
        self._arrivals = 0
        self.refused = 0  # events of new foreign keys beyond MAX_KEYS

    def claim(self, buses: Iterable[str]) -> None:
        """Mark `buses` as this node's GPUs: their pairs are kept whatever other buses have filled."""
        with self._lock:
            self._own.update(buses)
            self._foreign_keys = sum(1 for key in self._counts if key.bus not in self._own)

    def record(self, key: XidKey, at: float, source: str = Source.NVML, *, actionable: bool = True) -> bool:
        """Count one event at Unix time `at`; False when it was not counted (held, or refused)."""
        with self._lock:
            if source == Source.NVML and not self._nvml_counts:
                self._arrivals += 1
                self._held.append(_Held(self._arrivals, key, at))
                return False
            return self._count(key, at, actionable)

    def nvml_arrivals(self) -> int:
        """How many NVML events have arrived: taken by the kernel-log reader before it reads."""
        with self._lock:
            return self._arrivals

    def kmsg_read_past(self, arrivals: int) -> None:
        """The reader read the whole log after the first `arrivals` NVML events: the log has counted them."""
        with self._lock:
            while self._held and self._held[0].arrival <= arrivals:
                self._held.popleft()

    def kmsg_unreadable(self) -> None:
        """The kernel log can no longer be read: count the NVML events it has not covered, and every later one."""
        with self._lock:
            self._nvml_counts = True
            for held in self._held:
                self._count(held.key, held.at, actionable=True)
            self._held.clear()

    def _count(self, key: XidKey, at: float, actionable: bool) -> bool:
        previous = self._counts.get(key)
        if previous is None:
            foreign = key.bus not in self._own
            if foreign and self._foreign_keys >= MAX_KEYS:
                self.refused += 1
                return False
            self._foreign_keys += foreign
        before = previous.last_actionable if previous else None
        last_actionable = max(at, before or at) if actionable else before
        self._counts[key] = XidCount(key, (previous.count if previous else 0) + 1,
                                     max(at, previous.last_seen) if previous else at, last_actionable)
        return True

    def snapshot(self) -> tuple[XidCount, ...]:
        with self._lock:
            return tuple(self._counts.values())


def _address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


class XidWatcher:
    """Registers XID events on every GPU that supports them and counts them in a thread."""

    def __init__(self, devices: Sequence[Watched], counts: XidCounts) -> None:
        self._counts = counts
        self._stop = threading.Event()
        self._event_set = pynvml.nvmlEventSetCreate()
        self._by_handle: dict[int, Watched] = {}
        self.unsupported: list[str] = []
        for device in devices:
            try:
                pynvml.nvmlDeviceRegisterEvents(device.handle, pynvml.nvmlEventTypeXidCriticalError,
                                                self._event_set)
            except pynvml.NVMLError as exc:
                self.unsupported.append(f"GPU {device.bus} XID events: {exc}")
                continue
            self._by_handle[_address(device.handle)] = device
        self._thread = threading.Thread(target=self._run, name="trainmon-xid", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, WAIT_MS)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError as exc:
                if isinstance(exc, pynvml.NVMLError_Uninitialized):
                    return
                log.debug("xid wait failed error=%s", exc)
                self._stop.wait(WAIT_MS / 1000)
                continue
            device = self._by_handle.get(_address(data.device))
            if device is not None and data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                self._counts.record(XidKey(device.bus, int(data.eventData)), time.time(), Source.NVML)

    def stop(self) -> None:
        """Stop the thread (within one wait timeout) and free the event set; NVML is still up."""
        self._stop.set()
        self._thread.join(timeout=2 * WAIT_MS / 1000 + 1)
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlEventSetFree(self._event_set)
