"""Bounded TCP connections: a header deadline, a cap that evicts the oldest idle one, quiet accept errors.

An HTTP client that connects and sends nothing, or sends its request line a byte at a time, costs
a file descriptor for as long as it likes under plain uvicorn; a thousand of them exhaust the soft
`nofile` limit, and then scrapes and the collectors' own file reads fail with EMFILE. Here every
connection must finish its request headers within `header_timeout` of connecting (or of its first
byte after a keep-alive pause), as Go's `ReadHeaderTimeout` does, and at most `max_connections`
are open: one more closes the connection, among those with no request in progress, that has been
quiet longest (so a scraper's kept-alive connection goes after the attacker's silent ones).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

# Connections beyond Prometheus' one or two per target only ever come from a flood.
CONNECTION_CAP = 1024
# asyncio accepts up to `backlog` sockets per wake-up before any of them is seen (and maybe evicted),
# so the descriptors in flight are the open connections plus a few bursts of this many. Small, so
# that during a flood each turn of the event loop serves the open connections (a scraper's) before
# taking more new ones off the kernel's queue.
ACCEPT_BURST = 16
# The kernel's queue of connections not accepted yet: deep, so a flood does not drop a scraper's SYN.
LISTEN_BACKLOG = 4096
ACCEPT_FAILED = "socket.accept() out of system resource"


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    max_connections: int
    header_timeout: float


def raise_nofile_limit() -> int:
    """Raise the soft open-file limit to the hard one (systemd and shells start at 1024); returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft


def connection_limits(nofile: int, header_timeout: float) -> ConnectionLimits:
    """Half the descriptors for connections (at most CONNECTION_CAP): the rest stay for the collectors."""
    return ConnectionLimits(max_connections=max(8, min(CONNECTION_CAP, nofile // 2 - ACCEPT_BURST)),
                            header_timeout=header_timeout)


class ConnectionGuard:
    """The open connections and which one a new connection beyond the cap displaces.

    Connections that have not completed a request yet go first, then those that have (a scraper's
    kept-alive one); within each, the one heard from least recently.
    """

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        # Dicts as ordered sets, least recently heard from first.
        self._unproven: dict[GuardedH11Protocol, None] = {}
        self._proven: dict[GuardedH11Protocol, None] = {}

    def opened(self, connection: GuardedH11Protocol) -> None:
        self._unproven[connection] = None
        if len(self._unproven) + len(self._proven) > self.limits.max_connections:
            idle = (c for tier in (self._unproven, self._proven) for c in tier if c.idle and c is not connection)
            next(idle, connection).drop()

    def heard_from(self, connection: GuardedH11Protocol) -> None:
        for tier in (self._unproven, self._proven):
            if tier.pop(connection, False) is None:
                tier[connection] = None

    def served(self, connection: GuardedH11Protocol) -> None:
        if self._unproven.pop(connection, False) is None:
            self._proven[connection] = None

    def closed(self, connection: GuardedH11Protocol) -> None:
        self._unproven.pop(connection, None)
        self._proven.pop(connection, None)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, registered with a `ConnectionGuard` and holding a header deadline."""

    guard: ClassVar[ConnectionGuard]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None

    @classmethod
    def bound_to(cls, guard: ConnectionGuard) -> type[GuardedH11Protocol]:
        """A subclass for one server: uvicorn builds protocols from a class and its own arguments."""
        return type(cls.__name__, (cls,), {"guard": guard})

    @property
    def idle(self) -> bool:
        """No request in progress: waiting for the first, or between two on a kept-alive connection."""
        return self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete)

    # uvicorn's H11Protocol narrows asyncio's BaseTransport to Transport here, and so must we.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch_headers()
        self.guard.opened(self)

    def data_received(self, data: bytes) -> None:
        self.guard.heard_from(self)
        super().data_received(data)
        self._watch_headers()

    def on_response_complete(self) -> None:
        self.guard.served(self)
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        self.guard.closed(self)
        super().connection_lost(exc)

    def drop(self) -> None:
        self._cancel_deadline()
        self.guard.closed(self)
        self.transport.close()

    def _watch_headers(self) -> None:
        """Arm the deadline while a request's headers are awaited, disarm it once they are in."""
        if self.idle and not self.transport.is_closing():
            if self._header_deadline is None:
                self._header_deadline = self.loop.call_later(self.guard.limits.header_timeout, self._headers_late)
        else:
            self._cancel_deadline()

    def _headers_late(self) -> None:
        self._header_deadline = None
        if self.idle:
            self.drop()

    def _cancel_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None


class OncePerInterval(logging.Filter):
    """A logging filter that passes each distinct message at most once per `interval`.

    The next one to pass says how many were held back, so nothing is lost but the repetition. A
    network client chooses how often uvicorn warns ("Invalid HTTP request received.") and, with
    descriptors exhausted, how often asyncio reports a failed accept.
    """

    def __init__(self, interval: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._interval = interval
        self._clock = clock
        self._last: dict[object, float] = {}
        self._held: dict[object, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = self._clock()
        last = self._last.get(record.msg)
        if last is not None and now - last < self._interval:
            self._held[record.msg] = self._held.get(record.msg, 0) + 1
            return False
        if len(self._last) > 256:  # messages are a handful of templates; bound it anyway
            self._last.clear()
        self._last[record.msg] = now
        held = self._held.pop(record.msg, 0)
        if held and last is not None:
            record.msg = f"{record.msg} [{held} more like this in the last {now - last:.0f} s]"
        return True


class AcceptErrorLog:
    """An event-loop exception handler: a failed accept (EMFILE) is one warning without a traceback.

    asyncio reports every failed accept with a traceback and retries a second later, for as long as
    the descriptors stay exhausted; `log`'s `OncePerInterval` filter thins those out. Everything
    else goes to the loop's default handler.
    """

    logger = log.name

    def __init__(self, nofile: int) -> None:
        self._nofile = nofile

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_FAILED:
            loop.default_exception_handler(context)
            return
        log.warning("cannot accept HTTP connections: %s (open-file limit %d)", context.get("exception"),
                    self._nofile)
