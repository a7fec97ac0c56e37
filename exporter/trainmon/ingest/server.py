"""Receivers for hook datagrams: a Unix datagram socket and, optionally, UDP.

The daemon owns one `IngestServer`. One thread drains every bound socket as soon as it is readable
(the Unix datagram backlog can be as small as 10) and hands each datagram, with the kernel's sender
pid (`SO_PASSCRED`), to the `RankTable`. The daemon calls `maintain()` before every collection
cycle: it binds what is not bound yet (a socket directory that appears later, a port that frees up),
makes the socket again when its file or directory vanished, and restarts a receiver thread that
stopped. What it could not do is kept in `trouble`, which the training collector reports.

On a first bind only the default socket's directory (`/run/trainmon`, SPEC §2) is made when missing
and this user may (a fresh machine without the systemd unit's RuntimeDirectory=); any other missing
directory is an error naming `--ingest-socket` (a typo must not become a directory made as root). A
directory that existed and vanished later (someone cleaned /run) is made again with the mode and
group it had.
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
import struct
import threading
from pathlib import Path
from typing import cast

from trainmon.errors import CollectorError
from trainmon.ingest.ranks import Datagram, RankTable
from trainmon.settings import Address
from trainmon.wire import DEFAULT_SOCKET, MAX_DATAGRAM

log = logging.getLogger(__name__)

DEFAULT_DIRECTORY_MODE = 0o755  # as RuntimeDirectory= makes it: training processes of any user reach the socket
RECEIVE_BUFFER = 4 << 20  # bytes; the kernel caps it at net.core.rmem_max
MAX_BURST = 256  # datagrams read before handing them over; bounds the memory of one burst
RETRY_SECONDS = 1.0  # how long the thread waits when no socket is registered yet
UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
CREDENTIALS_SPACE = socket.CMSG_SPACE(UCRED.size)


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
        self._bound: tuple[int, int] | None = None  # (st_dev, st_ino) of the socket file we bound
        self._directory: tuple[int, int] | None = None  # (mode, gid) of its directory, to make it again
        self._udp_sock: socket.socket | None = None
        self.rebinds = 0
        self._selector = selectors.DefaultSelector()
        # close() writes here, so the receiver thread sleeps in select() without a timeout.
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._selector.register(self._wake_reader, selectors.EVENT_READ)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.trouble: str | None = None

    @property
    def table(self) -> RankTable:
        return self._table

    @property
    def enabled(self) -> bool:
        return self._path is not None or self._udp is not None or self._inherited_fd is not None

    def endpoints(self) -> list[str]:
        """What is bound now, for `trainmon check`."""
        bound = [f"unix:{self._unix.getsockname() or self._path}"] if self._unix is not None else []
        return bound + ([f"udp:{self._udp}"] if self._udp_sock is not None else [])

    def maintain(self) -> None:
        """Restart a stopped receiver, bind what is not bound, make a vanished socket again; every cycle.

        Sets `trouble` to what went wrong (the receiver had stopped and runs again now, or a socket
        could not be bound: the message says why and what to do), or to None when all is bound.
        """
        with self._lock:
            if self._stop.is_set() or not self.enabled:
                return
            errors = []
            if self._thread is not None and not self._thread.is_alive():
                errors.append("the ingest receiver thread had stopped; it was restarted")
                log.error("ingest receiver stopped; restarting it")
                self._thread = None
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain_loop, name="ingest", daemon=True)
                self._thread.start()
            if self._inherited_fd is not None and self._unix is None:
                self._unix = self._register(adopt_unix_datagram(self._inherited_fd))
            elif self._path is not None:
                try:
                    self._keep_unix_bound(self._path)
                except (OSError, CollectorError) as exc:
                    errors.append(str(exc))
            if self._udp is not None and self._udp_sock is None:
                try:
                    self._udp_sock = self._register(_bind_udp(self._udp))
                except OSError as exc:
                    errors.append(f"cannot bind UDP {self._udp}: {exc.strerror or exc}")
            self.trouble = "; ".join(errors) or None

    def _keep_unix_bound(self, path: Path) -> None:
        if self._unix is not None:
            if _inode(path) == self._bound:
                return
            log.warning("ingest socket vanished, making it again socket=%s", path)
            self._selector.unregister(self._unix)
            self._unix.close()
            self._unix = None
            self.rebinds += 1
            if self._directory is not None and not path.parent.is_dir():
                _make_directory(path.parent, *self._directory)
        self._unix = self._register(self._bind_unix(path))
        self._bound = _inode(path)

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
        if str(path) == DEFAULT_SOCKET and not path.parent.exists():
            with contextlib.suppress(OSError):  # a normal user's first run: the error below says why
                path.parent.mkdir(mode=DEFAULT_DIRECTORY_MODE)
        try:
            directory = path.parent.stat()
        except OSError as exc:
            raise CollectorError(
                f"--ingest-socket={str(path)!r}: the directory {path.parent} cannot be used: {exc.strerror or exc}; "
                "create it for the daemon's user (the systemd unit's RuntimeDirectory= does), pass "
                "--ingest-socket with a path in an existing directory, or --ingest-socket '' to disable the "
                "training hook's socket"
            ) from exc
        _remove_stale_socket(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.bind(str(path))
            os.chmod(path, self._mode)
            if self._group is not None:
                shutil.chown(path, group=self._group)
        except (OSError, LookupError) as exc:
            sock.close()
            with contextlib.suppress(OSError):
                path.unlink()
            raise CollectorError(f"cannot bind the ingest socket {path}: {exc}") from exc
        self._directory = (stat.S_IMODE(directory.st_mode), directory.st_gid)
        log.info("ingest listening socket=%s", path)
        return sock

    def _drain_loop(self) -> None:
        failed = False
        while not self._stop.is_set():
            try:
                ready = self._selector.select()
            except (OSError, ValueError, KeyError):  # a socket closed or re-made under us
                self._stop.wait(RETRY_SECONDS)
                continue
            for key, _ in ready:
                if key.fileobj is self._wake_reader:
                    continue
                try:
                    self._drain(cast(socket.socket, key.fileobj))  # only sockets are registered
                except Exception:  # the table rejects bad datagrams itself; this is a bug, and the receiver lives on
                    if not failed:
                        log.exception("ingest receive failed")
                    failed = True

    def _drain(self, sock: socket.socket) -> None:
        """Read what has queued up, in bursts, and hand each burst to the table at once."""
        credentials = sock.family == socket.AF_UNIX
        while True:
            burst: list[Datagram] = []
            while len(burst) < MAX_BURST:
                try:
                    # one byte more than allowed: larger is "oversized"
                    burst.append(_receive_unix(sock) if credentials else (sock.recv(MAX_DATAGRAM + 1), None, None))
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:
                    log.warning("ingest receive failed error=%s", exc)
                    break
            if burst:
                self._table.receive_burst(burst)
            if len(burst) < MAX_BURST:
                return


def _receive_unix(sock: socket.socket) -> Datagram:
    """One datagram and its sender's pid and uid from SCM_CREDENTIALS (pid 0 from another pid namespace)."""
    data, ancillary, _, _ = sock.recvmsg(MAX_DATAGRAM + 1, CREDENTIALS_SPACE)
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(payload) >= UCRED.size:
            pid, uid, _ = UCRED.unpack_from(payload)
            return data, pid, uid
    return data, 0, None


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _make_directory(path: Path, mode: int, gid: int) -> None:
    """Make the socket directory again as it was; the group only if this user may set it."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    with contextlib.suppress(PermissionError):
        os.chown(path, -1, gid)


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
    # Datagrams queued before this carry no credentials unless the unit has PassCredentials=yes.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
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
