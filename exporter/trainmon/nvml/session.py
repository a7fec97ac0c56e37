"""NVML initialisation and shutdown, with the library passed in rather than found globally.

pynvml keeps one loaded library per process (`pynvml.nvmlLib`). `library=None` lets pynvml
load the system's `libnvidia-ml.so.1`; an object (the demo's simulated node, or a test's
`ScenarioLibrary`) takes its place (`trainmon.compat.use_nvml_library`).
"""

from __future__ import annotations

import contextlib

import pynvml

from trainmon.compat import use_nvml_library


def as_text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class NvmlSession:
    def __init__(self, library: object | None = None) -> None:
        self._library = library
        self.is_open = False
        self.driver_version = ""

    def open(self) -> None:
        """`nvmlInit`. Raises what pynvml raises: LibraryNotFound, DriverNotLoaded, …"""
        if self._library is not None:
            use_nvml_library(self._library)
        pynvml.nvmlInit()
        self.is_open = True
        try:
            self.driver_version = as_text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError:
            self.driver_version = ""

    def device_count(self) -> int:
        return int(pynvml.nvmlDeviceGetCount())

    def close(self) -> None:
        if not self.is_open:
            return
        self.is_open = False
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
