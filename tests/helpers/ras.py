"""A loopback stand-in for NCCL RAS's client port: real TCP on 127.0.0.1, replaying a fixture answer.

It speaks the protocol of NVIDIA/nccl `src/ras/client_support.cc` (see tests/fixtures/nccl/NOTICE.md) and
misbehaves on request: `chunk` bytes per send (the poller sees partial reads), `delay` seconds before the
answer (a slow RAS), `close_after_handshake` (NCCL gone mid-conversation).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field


@dataclass
class RasStandIn:
    answer: bytes
    chunk: int = 1 << 20
    delay: float = 0.0
    close_after_handshake: bool = False
    commands: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept() that close() alone would leave blocked
        self._server.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):  # the poller gave up first
                self._converse(conn)

    def _converse(self, conn: socket.socket) -> None:
        lines = conn.makefile("rb")
        for raw in lines:
            command = raw.decode().strip()
            self.commands.append(command)
            if command.upper().startswith("CLIENT PROTOCOL "):
                conn.sendall(b"SERVER PROTOCOL 2\n")
                if self.close_after_handshake:
                    return
            elif command.upper().startswith("SET FORMAT "):
                conn.sendall(b"OK\n")
            elif command.upper() in ("STATUS", "VERBOSE STATUS"):
                time.sleep(self.delay)
                for start in range(0, len(self.answer), self.chunk):
                    conn.sendall(self.answer[start:start + self.chunk])
                return  # NCCL closes the connection after the answer
            else:
                conn.sendall(f"ERROR: Unknown command {command}\n".encode())
