"""Sends the rank's cumulative report from a background thread. Standard library only.

Nothing is queued: every `interval` the thread encodes the current values and sends one datagram,
so memory is bounded, a lost datagram loses nothing, and the report doubles as a heartbeat while a
step hangs. Sends never block (`EAGAIN` drops and counts) and never raise into training. A daemon
that restarts is found again on the next send: an unconnected `sendto` reaches whatever socket
is bound at the path now.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from trainmon.wire import DEFAULT_SOCKET, MAX_DATAGRAM, SOCKET_ENV, UDP_ENV

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 1.0  # seconds between reports (and heartbeats)
UNREACHABLE_WARNING_S = 60.0  # a daemon that is restarting is back well within this


class Transport(Protocol):
    def send(self, payload: bytes) -> None:
        """Send one datagram without blocking; raise `OSError` when it cannot go."""
        ...

    def close(self) -> None: ...


class UnixTransport:
    def __init__(self, path: str) -> None:
        self._path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)

    def send(self, payload: bytes) -> None:
        self._sock.sendto(payload, self._path)

    def close(self) -> None:
        self._sock.close()


class UdpTransport:
    """UDP to `host:port`; the name is resolved in the sender thread, on first use."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self._target = (host.strip("[]"), int(port))
        self._sock: socket.socket | None = None
        self._sockaddr: tuple[Any, ...] = ()  # getaddrinfo's, for the family

    def send(self, payload: bytes) -> None:
        if self._sock is None:
            family, kind, proto, _, self._sockaddr = socket.getaddrinfo(*self._target, type=socket.SOCK_DGRAM)[0]
            self._sock = socket.socket(family, kind, proto)
            self._sock.setblocking(False)
        self._sock.sendto(payload, self._sockaddr)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()


def transport_from_env(env: Mapping[str, str]) -> Transport:
    """`TRAINMON_INGEST_UDP` (HOST:PORT) when set, else the Unix socket `TRAINMON_INGEST_SOCKET`."""
    if env.get(UDP_ENV):
        return UdpTransport(env[UDP_ENV])
    return UnixTransport(env.get(SOCKET_ENV) or DEFAULT_SOCKET)


def interval_from_env(env: Mapping[str, str]) -> float:
    try:
        value = float(env.get("TRAINMON_REPORT_INTERVAL", DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL
    return value if 0.01 <= value <= 3600 else DEFAULT_INTERVAL


class Reporter:
    """The background thread: `encode(kind)` builds a datagram, `transport` sends it.

    Attributes:
        sent: datagrams handed to the kernel.
        dropped: datagrams dropped because the daemon's queue was full (`EAGAIN`/`ENOBUFS`).
        unreachable: datagrams dropped because no daemon was listening.
        errors: reports that failed to build or send for any other reason.
    """

    def __init__(self, encode: Callable[[str], bytes], transport: Transport, interval: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._encode = encode
        self._clock = clock
        self._unreachable_since: float | None = None
        self._warned_unreachable = False
        self._transport = transport
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainmon-reporter", daemon=True)
        self._send_lock = threading.Lock()
        self.sent = self.dropped = self.unreachable = self.errors = 0
        self._warned = False

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        self._thread.start()

    def send_now(self, kind: str = "report") -> None:
        with self._send_lock:
            try:
                payload = self._encode(kind)
                if len(payload) > MAX_DATAGRAM:
                    raise ValueError(f"report of {len(payload)} bytes exceeds {MAX_DATAGRAM}")
                self._transport.send(payload)
                self.sent += 1
                self._unreachable_since = None
            except (BlockingIOError, InterruptedError):
                self.dropped += 1
            except OSError as exc:
                if exc.errno in (errno.ENOBUFS, errno.EAGAIN):
                    self.dropped += 1
                else:
                    self.unreachable += 1
                    self._note_unreachable(exc)
            except Exception as exc:  # the hook never raises into training
                self.errors += 1
                if not self._warned:
                    self._warned = True
                    log.warning("trainmon report failed error=%r", exc)

    def _note_unreachable(self, exc: OSError) -> None:
        """Warn once, when no daemon has answered for a minute: a hook pointed at the wrong socket."""
        now = self._clock()
        if self._unreachable_since is None:
            self._unreachable_since = now
        if not self._warned_unreachable and now - self._unreachable_since >= UNREACHABLE_WARNING_S:
            self._warned_unreachable = True
            log.warning("%s", unreachable_warning(exc, now - self._unreachable_since, self._transport))

    def stop(self, *, bye: bool) -> None:
        """Stop the thread; with `bye`, send the goodbye that marks a clean exit."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self._interval + 1)
        if bye:
            self.send_now("bye")
        self._transport.close()

    def _run(self) -> None:
        self.send_now()
        while not self._stop.wait(self._interval):
            self.send_now()


def unreachable_warning(exc: OSError, seconds: float, transport: Transport) -> str:
    """The one warning of a hook no daemon answers: where it sends, the kernel's errno, and the fix."""
    path = getattr(transport, "_path", None)
    address = getattr(transport, "_target", None)
    target = f"socket {path}" if path else f"UDP {address[0]}:{address[1]}" if address else "the daemon"
    reason = f"{errno.errorcode.get(exc.errno or 0, 'error')} {exc.strerror or exc}"
    if path and exc.errno in (errno.EACCES, errno.EPERM):
        groups = ",".join(map(str, sorted({os.getgid(), *os.getgroups()})))
        fix = (f"this process (uid {os.getuid()}, gids {groups}) may not write to it: "
               "run training in the socket's group (the systemd unit's is trainmon; the DaemonSet's gid 10001, "
               "supplementalGroups in the training pod) or start the daemon with --ingest-socket-group GROUP "
               "(TRAINMON_INGEST_SOCKET_GROUP) naming a group training runs in")
    elif path and exc.errno in (errno.ENOENT, errno.ECONNREFUSED):
        fix = "no daemon is bound there: start trainmon serve, or set TRAINMON_INGEST_SOCKET to its --ingest-socket"
    else:
        fix = (f"the daemon's socket is set with TRAINMON_INGEST_SOCKET (default {DEFAULT_SOCKET}) or "
               "TRAINMON_INGEST_UDP")
    return (f"trainmon: no daemon has taken this rank's reports for {seconds:.0f}s: {target} ({reason}); {fix}; "
            "training goes on unaffected")
