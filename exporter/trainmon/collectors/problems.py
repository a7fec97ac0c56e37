"""Logging a collector's partial problems once: a dropped device or file, not the whole collector.

The scheduler logs a collector's state changes; the problems inside a successful collection (an
unknown device, an unreadable mapping file) are logged by the collector when they first appear,
and again only after they have cleared and come back. Each also shows, every cycle, in
`skipped` of `/api/v1/status`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable


class ProblemLog:
    def __init__(self, log: logging.Logger, collector: str) -> None:
        self._log = log
        self._collector = collector
        self._current: set[str] = set()

    def update(self, problems: Iterable[str]) -> tuple[str, ...]:
        """Record this cycle's problems (stable texts), log the new ones, and return them all, sorted."""
        current = set(problems)
        for problem in sorted(current - self._current):
            self._log.warning("collector dropped data collector=%s problem=%s", self._collector, problem)
        self._current = current
        return tuple(sorted(current))
