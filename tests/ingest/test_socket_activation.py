"""trainmon.socket: the daemon adopts a socket bound by systemd, so datagrams survive its restarts.

The test plays systemd: it binds the Unix datagram socket, keeps it open, and starts the daemon with
the descriptor as fd 3 and LISTEN_PID/LISTEN_FDS set, as sd_listen_fds(3) describes.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tests.helpers.metrics import parse_samples
from tests.helpers.net import free_port, wait_until
from tests.helpers.node import RankFeeder

LAUNCH = """
import os, sys
fd, argv = int(sys.argv[1]), sys.argv[2:]
os.dup2(fd, 3)
os.close(fd)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")
os.execv(sys.executable, [sys.executable, *argv])
"""


def start_activated(tmp_path: Path, sock: socket.socket, port: int, name: str) -> subprocess.Popen[bytes]:
    """Like systemd: the socket as fd 3, and `exec` keeps the pid, so LISTEN_PID is the daemon's."""
    fd = sock.fileno()
    argv = ["-m", "trainmon", "serve", "--collectors", "training", "--listen", f"127.0.0.1:{port}",
            "--ingest-socket", str(tmp_path / "ignored.sock")]
    with open(tmp_path / f"{name}.log", "wb") as log:
        return subprocess.Popen([sys.executable, "-c", LAUNCH, str(fd), *argv], pass_fds=(fd,), stdout=log,
                                stderr=subprocess.STDOUT)


def steps_of_rank(port: int, rank: int) -> float | None:
    samples = parse_samples(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
    return samples.get(("trainmon_train_steps_total", frozenset({("job_id", "bench-job"), ("rank", str(rank))})))


def test_datagrams_sent_during_a_restart_reach_the_next_daemon(tmp_path: Path) -> None:
    path = tmp_path / "ingest.sock"
    held = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # trainmon.socket's PassCredentials=yes
    held.bind(str(path))
    feeder = RankFeeder(path, ranks=2)
    port = free_port()
    first = start_activated(tmp_path, held, port, "first")
    try:
        feeder.send_all(step=3)
        wait_until(lambda: steps_of_rank(port, 1) == 3)
        first.send_signal(signal.SIGTERM)
        assert 0 == first.wait(10)

        assert path.exists()  # the adopted socket is systemd's: the daemon leaves it alone
        feeder.send_all(step=7)  # no daemon now: the datagrams wait in the socket's queue

        second = start_activated(tmp_path, held, port, "second")
        try:
            wait_until(lambda: steps_of_rank(port, 0) == 7 and steps_of_rank(port, 1) == 7)
            assert not (tmp_path / "ignored.sock").exists()  # it adopted fd 3 instead of binding the flag's path
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
        feeder.close()
        held.close()
