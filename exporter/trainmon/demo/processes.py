"""The simulated GPUs' processes: one sleeping child per GPU, named `simulated-rankN`.

They exist so that `--gpu-processes` names real pids that are not the daemon. They are forked
before any thread starts, die with the demo (`PR_SET_PDEATHSIG`) even when it is killed, and are
stopped and reaped by `stop()`.
"""

from __future__ import annotations

import ctypes
import os
import signal
from pathlib import Path

PR_SET_PDEATHSIG = 1


def _child(name: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    Path("/proc/self/comm").write_text(name)  # what psutil and ps show as the process name
    while True:
        signal.pause()


class SimulatedProcesses:
    def __init__(self, count: int) -> None:
        self.pids: list[int] = []
        for index in range(count):
            pid = os.fork()
            if pid == 0:
                try:
                    _child(f"simulated-rank{index}")
                finally:
                    os._exit(0)
            self.pids.append(pid)

    def stop(self) -> None:
        for pid in self.pids:
            os.kill(pid, signal.SIGTERM)
        for pid in self.pids:
            os.waitpid(pid, 0)
        self.pids = []
