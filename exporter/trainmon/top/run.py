"""The two ways `trainmon top` runs: one screen (`--once`), or a screen refreshed until interrupted."""

from __future__ import annotations

import os
import sys
import time
from collections import deque

from rich.console import Console, RenderableType
from rich.live import Live

from trainmon.top.fetch import Unreadable, read_daemon
from trainmon.top.screen import screen
from trainmon.top.view import Read, build_view

# How long --once waits for the daemon's next collection (its --interval is 5 s by default).
ONCE_WAIT_SECONDS = 15.0
POLL_SECONDS = 0.25
SCRIPT_WIDTH = 160  # columns when the output is not a terminal and COLUMNS does not say


def console() -> Console:
    """Rich's console: a terminal's width and colours; elsewhere no colours, and wide enough not to wrap rows."""
    found = Console()
    return found if found.is_terminal or "COLUMNS" in os.environ else Console(width=SCRIPT_WIDTH)


def once(url: str, timeout: float, window: float) -> int:
    """Print one screen, its rates over `window` seconds of the daemon's collections; 0, 1 when something
    fails, 2 when the daemon cannot be read."""
    try:
        first = now = read_daemon(url, timeout)
        deadline = time.monotonic() + window + ONCE_WAIT_SECONDS
        while _age(first, now) < window and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            now = read_daemon(url, timeout)
    except Unreadable as exc:
        print(f"trainmon top: {exc}", file=sys.stderr)
        return 2
    view = build_view(now, first)
    console().print(screen(view, url))
    return 1 if view.failing else 0


def live(url: str, interval: float, timeout: float, window: float) -> None:
    """Refresh every `interval` until interrupted: in place on a terminal, one screen after another elsewhere."""
    out = console()
    frames = Frames(url, timeout, window)
    if not out.is_terminal:
        while True:
            out.print(frames.next_screen())
            out.print()
            time.sleep(interval)
    with Live(frames.next_screen(), console=out, auto_refresh=False) as display:
        while True:
            time.sleep(interval)
            display.update(frames.next_screen(), refresh=True)


class Frames:
    """Successive reads of the daemon; rates are against the oldest read of the last `window` seconds."""

    def __init__(self, url: str, timeout: float, window: float) -> None:
        self._url, self._timeout, self._window = url, timeout, window
        self._reads: deque[Read] = deque()

    def next_screen(self) -> RenderableType:
        try:
            now = read_daemon(self._url, self._timeout)
        except Unreadable as exc:
            return screen(None, self._url, str(exc))
        self._reads.append(now)
        while len(self._reads) > 1 and _age(self._reads[0], now) > self._window:
            self._reads.popleft()
        return screen(build_view(now, self._reads[0]), self._url)


def _age(before: Read, now: Read) -> float:
    """Seconds between the collections of two reads (0 when either has no time)."""
    return (now.collected_at or 0.0) - (before.collected_at or 0.0) if before.collected_at else 0.0
