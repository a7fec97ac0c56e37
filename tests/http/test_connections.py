"""Idle, slow-header and flooding TCP clients against a real daemon: nothing they do blinds a scrape."""

from __future__ import annotations

import asyncio
import http.client
import logging
import socket
import time
from pathlib import Path

import pytest

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.metrics import parse_samples
from tests.helpers.net import wait_until
from tests.helpers.siege import PARTIAL_HEADER, flood, idle_connections
from tests.helpers.tools import require_tool
from tests.http.test_server import node_tree, tree_args
from trainmon.http.connections import ACCEPT_FAILED, AcceptErrorLog, OncePerInterval, connection_limits


def test_scrapes_and_collectors_survive_1100_idle_connections_at_nofile_1024(
        tmp_path: Path, daemons: list[Daemon]) -> None:
    """Under a hard limit of 1024 open files, 1,100 held connections cost no scrape and no collector."""
    prlimit = require_tool("prlimit")
    daemons.append(daemon := start_daemon(tmp_path, tree_args(*node_tree(tmp_path), "--interval", "0.5"),
                                          wrapper=[prlimit, "--nofile=1024:1024"]))
    log_lines_before = len(daemon.log().splitlines())

    with idle_connections(daemon.port, 1100) as held:
        scrapes = []
        for _ in range(6):  # across several collection cycles, each opening files under /proc and /sys
            scrapes.append(daemon.get("/metrics", headers={"Accept": "text/plain"}))
            time.sleep(0.5)

    assert len(held) == 1100
    assert [200] * 6 == [r.status_code for r in scrapes]
    samples = parse_samples(scrapes[-1].text)
    assert 1.0 == samples[("trainmon_collector_success", frozenset({("collector", "nvme")}))]
    assert 1.0 == samples[("trainmon_collector_success", frozenset({("collector", "infiniband")}))]
    assert len(daemon.log().splitlines()) - log_lines_before < 10, daemon.log()[-3000:]


def test_the_soft_open_file_limit_is_raised_to_the_hard_one(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    """Started with 1024 soft and 4096 hard (systemd's and most shells' default soft limit), it serves with 4096."""
    prlimit = require_tool("prlimit")
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "nvme"],
                                          wrapper=[prlimit, "--nofile=1024:4096"]))

    limits = Path(f"/proc/{daemon.process.pid}/limits").read_text()

    assert ["4096", "4096"] == next(line.split()[3:5] for line in limits.splitlines()
                                    if line.startswith("Max open files"))


def test_threads_come_back_after_a_2000_connection_flood(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    """A flood of /metrics requests leaves no extra threads behind, and the excess got 503, not a hang."""
    daemons.append(daemon := start_daemon(tmp_path, tree_args(*node_tree(tmp_path))))
    for _ in range(3):
        assert 200 == daemon.get("/metrics").status_code
    baseline = daemon.proc_status("Threads")

    outcomes = flood(daemon.port, 2000)
    after = wait_until(lambda: (t := daemon.proc_status("Threads")) <= baseline and t, timeout=15)

    assert outcomes["200"] > 0
    assert 0 == outcomes["waiting"], outcomes
    assert set(outcomes) <= {"200", "503", "closed", "waiting"}, outcomes
    assert after == baseline
    assert 200 == daemon.get("/metrics").status_code


def test_silent_and_slow_header_connections_are_closed_kept_alive_ones_are_not(
        tmp_path: Path, daemons: list[Daemon]) -> None:
    """--web-header-timeout runs from connecting (or a request's first byte), not while a connection idles."""
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "nvme", "--web-header-timeout", "1"]))
    kept = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
    kept.request("GET", "/healthz")
    first = kept.getresponse()
    first.read()
    silent = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
    slow = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
    slow.sendall(PARTIAL_HEADER)

    trickled = 0
    try:
        for trickled in range(40):  # one header line every 0.1 s: never a whole request
            slow.sendall(b"X-Slow: %d\r\n" % trickled)
            time.sleep(0.1)
    except OSError:
        pass
    silent_answer = silent.recv(1)
    kept.request("GET", "/healthz")
    second = kept.getresponse()

    assert trickled < 39, "the slow connection was never closed"
    assert b"" == silent_answer
    assert (200, 200) == (first.status, second.status)
    for sock in (silent, slow):
        sock.close()
    kept.close()


def test_a_connection_beyond_the_cap_closes_the_oldest_idle_one(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    """At the connection cap (half of a 1024 nofile), new clients get served and the oldest idle goes."""
    prlimit = require_tool("prlimit")
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "nvme"],
                                          wrapper=[prlimit, "--nofile=1024:1024"]))
    cap = connection_limits(1024, 10.0).max_connections

    with idle_connections(daemon.port, cap + 20) as held:
        answers = [daemon.get("/healthz").status_code for _ in range(5)]
        oldest = held[0]
        oldest.settimeout(10)
        oldest_answer = oldest.recv(1)
        newest = held[-1]
        newest.setblocking(False)
        with pytest.raises(BlockingIOError):  # still open
            newest.recv(1)

    assert [200] * 5 == answers
    assert b"" == oldest_answer


def test_failed_accepts_are_one_line_a_minute_with_a_count(caplog: pytest.LogCaptureFixture) -> None:
    """asyncio reports every EMFILE on accept with a traceback; now one line per minute says how many."""
    now = [0.0]
    logger = logging.getLogger(AcceptErrorLog.logger)
    once = OncePerInterval(interval=60.0, clock=lambda: now[0])
    logger.addFilter(once)
    handler = AcceptErrorLog(nofile=1024)
    loop = asyncio.new_event_loop()
    error = {"message": ACCEPT_FAILED, "exception": OSError(24, "Too many open files")}
    try:
        with caplog.at_level(logging.WARNING):
            for second in range(121):
                now[0] = float(second)
                handler(loop, error)
            handler(loop, {"message": "something else"})
    finally:
        logger.removeFilter(once)
        loop.close()

    accept_lines = [r.getMessage() for r in caplog.records if "cannot accept" in r.getMessage()]
    assert 3 == len(accept_lines)
    assert "[Errno 24] Too many open files (open-file limit 1024)" in accept_lines[0]
    assert accept_lines[1].endswith("[59 more like this in the last 60 s]")
    assert all(r.exc_info is None for r in caplog.records if "cannot accept" in r.getMessage())
    assert any(r.getMessage() == "something else" for r in caplog.records)


def test_garbage_requests_do_not_grow_the_log(tmp_path: Path, daemons) -> None:  # type: ignore[no-untyped-def]
    """uvicorn warns once per malformed request; a client sending 100 of them gets one line."""
    daemons.append(daemon := start_daemon(tmp_path, ["--collectors", "nvme"]))
    lines_before = len(daemon.log().splitlines())

    for _ in range(100):
        with socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as garbage:
            garbage.sendall(b"\x00\x01 not http\r\n\r\n")
            garbage.recv(4096)

    assert 200 == daemon.get("/healthz").status_code
    assert len(daemon.log().splitlines()) - lines_before <= 2, daemon.log()[-2000:]
