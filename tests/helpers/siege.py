"""Many loopback TCP connections at once, as an attacker holds them: idle, half a header, or a full request."""

from __future__ import annotations

import base64
import contextlib
import resource
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx

PARTIAL_HEADER = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # no blank line: the headers never end
FULL_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
WRONG_PASSWORD = (b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: Basic "
                  + base64.b64encode(b"prometheus:wrong") + b"\r\n\r\n")


def allow_open_files(count: int) -> None:
    """Raise this process's soft open-file limit so that it can hold `count` more sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = count + 256
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


def connect(port: int, first_bytes: bytes = b"") -> socket.socket | None:
    """One connection that sends `first_bytes`; None when the server's queue or the client side is full."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return None
    try:
        if first_bytes:
            sock.sendall(first_bytes)
    except OSError:
        sock.close()
        return None
    return sock


@contextlib.contextmanager
def idle_connections(port: int, count: int) -> Iterator[list[socket.socket]]:
    """Hold `count` connections open: half send nothing, half send a header that never ends."""
    allow_open_files(count)
    held = [s for i in range(count) if (s := connect(port, PARTIAL_HEADER if i % 2 else b"")) is not None]
    try:
        yield held
    finally:
        for sock in held:
            sock.close()


class Requests:
    """Connections that each sent `request`, read as their answers arrive, counted by status line."""

    def __init__(self, port: int, request: bytes, outcomes: Counter[str]) -> None:
        self._port, self._request, self._outcomes = port, request, outcomes
        self._selector = selectors.DefaultSelector()
        self._answers: dict[socket.socket, bytearray] = {}

    @property
    def pending(self) -> int:
        return len(self._answers)

    def open(self) -> None:
        sock = connect(self._port, self._request)
        if sock is None:
            self._outcomes["refused"] += 1
            return
        sock.setblocking(False)
        self._selector.register(sock, selectors.EVENT_READ)
        self._answers[sock] = bytearray()

    def read(self, timeout: float) -> int:
        """Read what arrived within `timeout`; returns how many answers ended (their connections closed)."""
        ended = 0
        for key, _ in self._selector.select(timeout=timeout):
            ready = key.fileobj
            assert isinstance(ready, socket.socket)
            try:
                chunk = ready.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if chunk:
                self._answers[ready] += chunk
                continue
            self._outcomes[_status(self._answers.pop(ready))] += 1
            self._selector.unregister(ready)
            ready.close()
            ended += 1
        return ended

    def close(self) -> None:
        for sock in self._answers:
            sock.close()
        self._selector.close()


def flood(port: int, count: int, timeout: float = 30.0) -> Counter[str]:
    """Open `count` connections that each send a whole /metrics request, then read every answer.

    Returns how many got each status line ("200", "503"), were closed without an answer
    ("closed") or were still waiting at `timeout` ("waiting").
    """
    allow_open_files(count)
    outcomes: Counter[str] = Counter()
    requests = Requests(port, FULL_REQUEST, outcomes)
    for _ in range(count):
        requests.open()
    deadline = time.monotonic() + timeout
    while requests.pending and time.monotonic() < deadline:
        requests.read(0.5)
    outcomes["waiting"] += requests.pending
    requests.close()
    return outcomes


def _status(answer: bytearray) -> str:
    if not answer.startswith(b"HTTP/1.1 "):
        return "closed"
    return answer[9:12].decode()


@dataclass
class Flood:
    """What a running `request_flood` has been answered so far, by status line."""

    outcomes: Counter[str] = field(default_factory=Counter)


@contextlib.contextmanager
def request_flood(port: int, clients: int, request: bytes) -> Iterator[Flood]:
    """`clients` connections that each send `request` (with `Connection: close`), read the answer and
    send it again on a new connection, until the block ends; one thread, so the caller's own requests
    do not queue behind many of the flood's threads for the interpreter."""
    allow_open_files(clients)
    flood = Flood()
    stop = threading.Event()

    def run() -> None:
        requests = Requests(port, request, flood.outcomes)
        for _ in range(clients):
            requests.open()
        while not stop.is_set():
            for _ in range(requests.read(0.2)):
                requests.open()
        requests.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield flood
    finally:
        stop.set()
        thread.join(timeout=10)


def timed_scrapes(client: httpx.Client, count: int) -> tuple[list[int], list[float]]:
    """`count` GETs of /metrics 0.05 s apart: each one's status and seconds to its whole answer."""
    statuses, seconds = [], []
    for _ in range(count):
        start = time.perf_counter()
        statuses.append(client.get("/metrics").status_code)
        seconds.append(time.perf_counter() - start)
        time.sleep(0.05)
    return statuses, seconds
