"""XID errors from an NVML event set, read by a dedicated thread.

The XID event type is registered on its own: if any requested type is unsupported NVML
registers nothing. Events from before registration are lost. NVML re-initialisation invalidates
the set, so the owner stops the watcher before `nvmlShutdown` and starts a new one afterwards;
the counts live in `XidCounts`, which outlives every watcher.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

log = logging.getLogger(__name__)

WAIT_MS = 500  # nvmlEventSetWait timeout: how long `stop()` may wait for the thread


@dataclass(frozen=True, slots=True)
class XidKey:
    gpu: int
    uuid: str
    xid: int


@dataclass(frozen=True, slots=True)
class XidCount:
    key: XidKey
    count: int
    last_seen: float  # Unix time


@dataclass(frozen=True, slots=True)
class Watched:
    handle: Any
    index: int
    uuid: str


class XidCounts:
    """Thread-safe XID totals for the life of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[XidKey, XidCount] = {}

    def record(self, key: XidKey, at: float) -> None:
        with self._lock:
            previous = self._counts.get(key)
            self._counts[key] = XidCount(key, (previous.count if previous else 0) + 1, at)

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
                self.unsupported.append(f"gpu {device.index} XID events: {exc}")
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
                self._counts.record(XidKey(device.index, device.uuid, int(data.eventData)), time.time())

    def stop(self) -> None:
        """Stop the thread (within one wait timeout) and free the event set; NVML is still up."""
        self._stop.set()
        self._thread.join(timeout=2 * WAIT_MS / 1000 + 1)
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlEventSetFree(self._event_set)
