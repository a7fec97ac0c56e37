from __future__ import annotations

import socket
import time
from collections.abc import Callable


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Without an `interval`, a wait polls at once and then ever less often, up to every quarter second: a condition met
# quickly is seen quickly, and a wait of minutes (a Prometheus alert's `for:`, a daemon's metrics) does not query
# its target twenty times a second (in the whole suite that came to about 1% of its CPU).
FIRST_POLL_S, LAST_POLL_S = 0.05, 0.25


def wait_until(condition: Callable[[], object], timeout: float = 15.0, interval: float | None = None,
               explain: Callable[[], object] | None = None) -> object:
    """Poll `condition` until it returns something truthy; fail with its last value (and what `explain` says)
    otherwise. `interval`: a fixed time between polls instead of the growing one."""
    deadline = time.monotonic() + timeout
    last: object = None
    pause = FIRST_POLL_S if interval is None else interval
    while time.monotonic() < deadline:
        try:
            last = condition()
        except Exception as exc:  # the thing polled may not be up yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(pause)
        if interval is None:
            pause = min(pause * 1.5, LAST_POLL_S)
    because = f"; {explain()!r}" if explain else ""
    raise AssertionError(f"condition not met within {timeout}s; last value: {last!r}{because}")
