"""A Python process whose wall clock a test steps, as NTP or `date -s` would step the system's.

Started with this directory first on PYTHONPATH and `WALL_CLOCK_STEP_FILE` naming a file, its
`time.time()` is the real time plus the seconds the file holds (none while it is absent or empty).
The monotonic clocks are left alone, as a step of the system clock leaves them.
"""

from __future__ import annotations

import os
import time

_real_time = time.time
_step_file = os.environ.get("WALL_CLOCK_STEP_FILE")


def _stepped_time() -> float:
    try:
        with open(str(_step_file)) as file:
            step = float(file.read() or 0)
    except (OSError, ValueError):
        step = 0.0
    return _real_time() + step


if _step_file:
    time.time = _stepped_time
