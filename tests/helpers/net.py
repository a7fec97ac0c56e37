from __future__ import annotations

import socket
import time
from collections.abc import Callable


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], object], timeout: float = 15.0, interval: float = 0.05,
               explain: Callable[[], object] | None = None) -> object:
    """Poll `condition` until it returns something truthy; fail with its last value (and what `explain` says)
    otherwise."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except Exception as exc:  # the thing polled may not be up yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    because = f"; {explain()!r}" if explain else ""
    raise AssertionError(f"condition not met within {timeout}s; last value: {last!r}{because}")
