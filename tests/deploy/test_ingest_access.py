"""Who may report to the daemon: the ingest socket's mode and group, and the remote-UDP guard."""

from __future__ import annotations

import grp
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import free_port, wait_until


def other_group() -> grp.struct_group:
    """A group this process may give a file to, other than its own when it has one to spare."""
    candidates = [g for g in grp.getgrall() if g.gr_gid != os.getegid()]
    if os.geteuid() != 0:
        candidates = [g for g in candidates if g.gr_gid in os.getgroups()]
    return candidates[0] if candidates else grp.getgrgid(os.getegid())


def test_ingest_socket_has_the_configured_mode_and_group(tmp_path: Path, daemons: list[Daemon]) -> None:
    """--ingest-socket-mode and --ingest-socket-group decide who may send, not the umask or the daemon's group."""
    group = other_group()
    path = tmp_path / "run" / "ingest.sock"
    path.parent.mkdir()  # the daemon makes no socket directory of its own (a typo must not become one)
    daemons.append(start_daemon(tmp_path, ["--collectors", "training", "--ingest-socket", str(path),
                                           "--ingest-socket-mode", "0620", "--ingest-socket-group", group.gr_name]))

    wait_until(path.exists, timeout=10)
    info = path.stat()

    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o620
    assert info.st_gid == group.gr_gid


@pytest.mark.parametrize("address", ["0.0.0.0:9843", "[::]:9843", "10.1.2.3:9843"])
def test_remote_udp_ingest_needs_its_own_flag(tmp_path: Path, address: str) -> None:
    """A non-loopback --ingest-udp accepts datagrams from the network: refused, exit 2, one line saying how."""
    result = subprocess.run([sys.executable, "-m", "trainmon", "serve", "--listen", f"127.0.0.1:{free_port()}",
                             "--ingest-socket", "", "--ingest-udp", address],
                            capture_output=True, text=True, timeout=30)

    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("trainmon: error: --ingest-udp=")
    assert "--ingest-udp-allow-remote" in line
