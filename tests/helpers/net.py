from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range. One the kernel hands out (`bind` to port 0) it
    may hand the next outgoing connection too (the suite opens hundreds a second: scrapes, HTTP clients), and a CI
    run lost a demo to "Address already in use" between the pick and the daemon's bind. Workers pick at random
    from some 16,000 ports, so two seldom meet."""
    first_ephemeral = int(EPHEMERAL_RANGE.read_text().split()[0])
    for _ in range(1000):
        port = random.randrange(first_ephemeral // 2, first_ephemeral)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in [{first_ephemeral // 2}, {first_ephemeral})")


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
