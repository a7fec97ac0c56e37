"""The daemon's log of ranks coming and going: one line each, at most `burst` lines a window.

A job of a thousand ranks starting at once would otherwise write a thousand lines: past the burst the
lines are counted, and the count is said in one line when the window has passed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("trainmon.ingest")

BURST = 20  # lines per window
WINDOW_S = 60.0


class RankEvents:
    """Logs arrivals and departures of ranks, rate-limited; `clock` is monotonic seconds."""

    def __init__(self, clock: Callable[[], float], burst: int = BURST, window: float = WINDOW_S) -> None:
        self._clock = clock
        self._burst = burst
        self._window = window
        self._opened: float | None = None
        self._logged = 0
        self._untold = 0

    def arrived(self, job_id: str, rank: int, pid: int, world_size: int | None) -> None:
        self._line("rank arrived job_id=%s rank=%d pid=%d world_size=%s", job_id, rank, pid, world_size)

    def left(self, job_id: str, rank: int, reason: str) -> None:
        self._line("rank left job_id=%s rank=%d reason=%s", job_id, rank, reason)

    def flush(self) -> None:
        """Say how many lines were left out, once the window they fell in has passed."""
        if self._opened is not None and self._clock() - self._opened >= self._window:
            if self._untold:
                log.info("rank arrivals and departures not logged in the last %.0fs: %d (at most %d lines a window)",
                         self._window, self._untold, self._burst)
            self._opened, self._logged, self._untold = None, 0, 0

    def _line(self, message: str, *args: object) -> None:
        self.flush()
        if self._opened is None:
            self._opened = self._clock()
        if self._logged < self._burst:
            self._logged += 1
            log.info(message, *args)
        else:
            self._untold += 1
