"""Logging a collector's partial problems once: a dropped device or file, not the whole collector.

The scheduler logs a collector's state changes; the problems inside a successful collection (an
unknown device, an unreadable mapping file) are logged by the collector when they first appear,
and again only after they have cleared and come back. Each also shows, every cycle, in
`skipped` of `/api/v1/status`. Both are bounded: a kubelet that lists 300,000 unknown devices, or a
directory of 10,000 bad files, gives `MAX_LOGGED` log lines a cycle and `MAX_LISTED` notes, each
followed by one line that counts the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

MAX_LOGGED = 20  # new problems logged one line each per cycle; one more line counts the others
MAX_LISTED = 100  # problems listed in `skipped`; the last line counts the others


class ProblemLog:
    def __init__(self, log: logging.Logger, collector: str) -> None:
        self._log = log
        self._collector = collector
        self._current: set[str] = set()

    def update(self, problems: Iterable[str]) -> tuple[str, ...]:
        """Record this cycle's problems (stable texts), log the new ones, and return them, sorted (bounded)."""
        current = set(problems)
        new = sorted(current - self._current)
        for problem in new[:MAX_LOGGED]:
            self._log.warning("collector dropped data collector=%s problem=%s", self._collector, problem)
        if len(new) > MAX_LOGGED:
            self._log.warning("collector dropped data collector=%s problem=%d more new problems, not logged one by "
                              "one (%d in all: /api/v1/status lists the first %d)", self._collector,
                              len(new) - MAX_LOGGED, len(current), MAX_LISTED - 1)
        self._current = current
        return bounded(sorted(current))


def bounded(notes: list[str], limit: int = MAX_LISTED) -> tuple[str, ...]:
    """`notes`, or their first `limit - 1` and a line that counts the others."""
    if len(notes) <= limit:
        return tuple(notes)
    return (*notes[:limit - 1], f"{len(notes) - limit + 1} more problems not listed")
