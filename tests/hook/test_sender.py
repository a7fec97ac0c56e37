"""The sender tells a user once, at warning, when no daemon takes its reports for a minute."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.clock import Clock
from trainmon.hook.sender import Reporter, UnixTransport


def send_at(reporter: Reporter, clock: Clock, *times: float) -> None:
    for t in times:
        clock.now = t
        reporter.send_now()


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_no_daemon_for_a_minute_warns_once_naming_the_variable(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    reporter = Reporter(lambda kind: b"{}", UnixTransport(str(tmp_path / "nobody.sock")), 1.0, clock=clock)

    with caplog.at_level(logging.WARNING, logger="trainmon.hook.sender"):
        send_at(reporter, clock, 0.0, 30.0, 59.0)
        before = warnings(caplog)
        send_at(reporter, clock, 60.0, 90.0, 600.0)

    assert [] == before
    [message] = warnings(caplog)
    assert "TRAINMON_INGEST_SOCKET" in message and "60s" in message
    assert 6 == reporter.unreachable


def test_a_daemon_that_answers_starts_the_minute_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "ingest.sock"
    clock = Clock()
    reporter = Reporter(lambda kind: b"{}", UnixTransport(str(path)), 1.0, clock=clock)

    with caplog.at_level(logging.WARNING, logger="trainmon.hook.sender"):
        send_at(reporter, clock, 0.0, 50.0)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as daemon:
            daemon.bind(str(path))
            send_at(reporter, clock, 55.0)
        path.unlink()
        send_at(reporter, clock, 70.0, 110.0)

    assert 1 == reporter.sent
    assert [] == warnings(caplog)


REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
SEND_AS_NOBODY = """
import logging, os, sys
from tests.helpers.clock import Clock
from trainmon.hook.sender import Reporter, UnixTransport
logging.basicConfig(level=logging.WARNING, format="%(message)s")
clock = Clock()
reporter = Reporter(lambda kind: b"{}", UnixTransport(sys.argv[1]), 1.0, clock=clock)
os.setgroups([])
os.setgid(NOBODY)
os.setuid(NOBODY)
for clock.now in (0.0, 60.0):
    reporter.send_now()
""".replace("NOBODY", str(NOBODY))


def test_a_user_the_socket_refuses_is_told_the_socket_the_errno_and_the_flag(tmp_path: Path) -> None:
    """A root-owned 0660 socket (the default) and a training process of another uid: the one warning names
    the path, EACCES and `--ingest-socket-group` (before: "(Permission denied)" and the variable only)."""
    with tempfile.TemporaryDirectory() as where, socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as daemon:
        os.chmod(where, 0o755)
        path = os.path.join(where, "ingest.sock")
        daemon.bind(path)
        os.chmod(path, 0o660)
        done = subprocess.run([sys.executable, "-c", SEND_AS_NOBODY, path], cwd=REPO, capture_output=True,
                              text=True, timeout=30, check=True)

    [message] = done.stderr.splitlines()
    assert f"socket {path} (EACCES Permission denied)" in message, message
    assert f"uid {NOBODY}" in message and "--ingest-socket-group GROUP" in message, message
