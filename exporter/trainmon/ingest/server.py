"""Receivers for hook datagrams: a Unix datagram socket and, optionally, UDP.

One thread drains every bound socket as soon as it is readable (the Unix datagram backlog can be
as small as 10) and hands each datagram to the `RankTable`. Binding is retried by `start()` until
it succeeds, so a socket directory that appears later, or a port that frees up, recovers without
a restart.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import selectors
import shutil
import socket
import stat
import threading
from pathlib import Path

from trainmon.errors import CollectorError
from trainmon.ingest.ranks import RankTable
from trainmon.settings import Address
from trainmon.wire import MAX_DATAGRAM

log = logging.getLogger(__name__)

RECEIVE_BUFFER = 4 << 20  # bytes; the kernel caps it at net.core.rmem_max
MAX_BURST = 256  # datagrams read before handing them over; bounds the memory of one burst
RETRY_SECONDS = 1.0  # how long the thread waits when no socket is registered yet


class IngestServer:
    """Binds the configured sockets and drains them into `table` from one daemon thread.

    Args:
        table: where valid datagrams go.
        socket_path: the Unix datagram socket; "" for none.
        mode: permission bits of the socket file.
        group: group that owns the socket file, or None.
        udp: UDP address, or None.
        inherited_fd: a Unix datagram socket bound by systemd (`trainmon.socket`), used instead of
            binding `socket_path`; it outlives the daemon, so it is never unlinked here.
    """

    def __init__(
        self, table: RankTable, *, socket_path: str, mode: int, group: str | None, udp: Address | None,
        inherited_fd: int | None = None,
    ) -> None:
        self._table = table
        self._path = Path(socket_path) if socket_path else None
        self._inherited_fd = inherited_fd
        self._mode = mode
        self._group = group
        self._udp = udp
        self._unix: socket.socket | None = None
        self._udp_sock: socket.socket | None = None
        self._selector = selectors.DefaultSelector()
        # close() writes here, so the receiver thread sleeps in select() without a timeout.
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._selector.register(self._wake_reader, selectors.EVENT_READ)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self._path is not None or self._udp is not None or self._inherited_fd is not None

    def endpoints(self) -> list[str]:
        """What is bound now, for `trainmon check`."""
        bound = [f"unix:{self._unix.getsockname() or self._path}"] if self._unix is not None else []
        return bound + ([f"udp:{self._udp}"] if self._udp_sock is not None else [])

    def start(self) -> None:
        """Bind whatever is not bound yet and start the receiver thread.

        Raises:
            CollectorError: a socket could not be bound; the message says why and what to do.
        """
        with self._lock:
            if self._stop.is_set():
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain_loop, name="ingest", daemon=True)
                self._thread.start()
            errors = []
            if self._inherited_fd is not None and self._unix is None:
                self._unix = self._register(adopt_unix_datagram(self._inherited_fd))
            elif self._path is not None and self._unix is None:
                try:
                    self._unix = self._register(self._bind_unix(self._path))
                except (OSError, CollectorError) as exc:
                    errors.append(str(exc))
            if self._udp is not None and self._udp_sock is None:
                try:
                    self._udp_sock = self._register(_bind_udp(self._udp))
                except OSError as exc:
                    errors.append(f"cannot bind UDP {self._udp}: {exc.strerror or exc}")
            if errors:
                raise CollectorError("; ".join(errors))

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_writer.send(b"x")
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            for sock in (self._unix, self._udp_sock):
                if sock is not None:
                    sock.close()
            if self._unix is not None and self._path is not None and self._inherited_fd is None:
                with contextlib.suppress(OSError):
                    self._path.unlink()
            self._unix = self._udp_sock = None
            self._selector.close()
            self._wake_reader.close()
            self._wake_writer.close()

    def _register(self, sock: socket.socket) -> socket.socket:
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        self._selector.register(sock, selectors.EVENT_READ)
        return sock

    def _bind_unix(self, path: Path) -> socket.socket:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CollectorError(
                f"cannot create the ingest socket directory {path.parent}: {exc.strerror or exc}; "
                "create it for this user, pass --ingest-socket with a writable path, or --ingest-socket '' "
                "to disable the training hook's socket"
            ) from exc
        _remove_stale_socket(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(str(path))
            os.chmod(path, self._mode)
            if self._group is not None:
                shutil.chown(path, group=self._group)
        except (OSError, LookupError) as exc:
            sock.close()
            with contextlib.suppress(OSError):
                path.unlink()
            raise CollectorError(f"cannot bind the ingest socket {path}: {exc}") from exc
        log.info("ingest listening socket=%s", path)
        return sock

    def _drain_loop(self) -> None:
        while not self._stop.is_set():
            try:
                ready = self._selector.select()
            except (OSError, ValueError):  # closed under us
                self._stop.wait(RETRY_SECONDS)
                continue
            for key, _ in ready:
                if key.fileobj is not self._wake_reader:
                    self._drain(key.fileobj)  # type: ignore[arg-type]

    def _drain(self, sock: socket.socket) -> None:
        """Read what has queued up, in bursts, and hand each burst to the table at once."""
        while True:
            burst = []
            while len(burst) < MAX_BURST:
                try:
                    burst.append(sock.recv(MAX_DATAGRAM + 1))  # one byte more than allowed: larger is "oversized"
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:
                    log.warning("ingest receive failed error=%s", exc)
                    break
            if burst:
                self._table.receive_burst(burst)
            if len(burst) < MAX_BURST:
                return


def _remove_stale_socket(path: Path) -> None:
    """Unlink a socket file left by an earlier daemon; refuse when a daemon still listens on it."""
    try:
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise CollectorError(f"{path} exists and is not a socket")
    except FileNotFoundError:
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(str(path))
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise
        path.unlink(missing_ok=True)
        return
    finally:
        probe.close()
    raise CollectorError(f"another process is listening on {path}")


def adopt_unix_datagram(fd: int) -> socket.socket:
    """The socket systemd passed as `fd`; refused unless it is a Unix datagram socket."""
    sock = socket.socket(fileno=fd)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_DGRAM:
        sock.detach()
        raise CollectorError(f"file descriptor {fd} from systemd is not a Unix datagram socket "
                             "(trainmon.socket needs ListenDatagram=)")
    log.info("ingest listening socket=%s (from systemd)", sock.getsockname())
    return sock


def _bind_udp(address: Address) -> socket.socket:
    family, kind, proto, _, sockaddr = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_DGRAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.bind(sockaddr)
    except OSError:
        sock.close()
        raise
    log.info("ingest listening udp=%s", address)
    return sock
