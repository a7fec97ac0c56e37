"""`trainmon top` against a real `trainmon demo` whose GPU 6 is lost: `--once` piped (as a script reads it),
and the live view in a pseudo-terminal for a few refreshes."""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator

import pytest

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import wait_until
from tests.torch.jobs import REPO, samples
from trainmon.demo.job import SMOKE_TEST_SUFFIX

JOB = "demo-llama-8b-gpu-lost"
SMOKE_TEST = f"{JOB}{SMOKE_TEST_SUFFIX}"  # the demo's one-step run of the job, exited before the job starts
LOST_UUID = "GPU-5e1a7ed0-0006-4c0d-8e5a-0000d0e00006"
WINDOW = "10"  # seconds of collections the rates are over: several of the demo's steps, even on a busy machine
# GPU, util, SM, memory, power, health, owner
GPU_ROW = re.compile(r"^\s*(\d)\s+H100 80GB HBM3\s+(\S+)\s+(\S+)\s+(\S+ GiB|-)\s+(\S+ W|-)\s+(\S+)\s+(.*?)\s*$",
                     re.M)
RANK_ROW = re.compile(rf"^\s*({JOB}\S*)\s+(\d)\s+(\d)\s+(\S+ m?s|-)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)",
                      re.M)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
HEADER = "trainmon top  http"

# A demo, then a GPU lost in it; the demo's start and the loss may take minutes on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
# The loss 45 s after the demo starts: the daemon must have named GPU 6 before it is lost (a GPU lost before
# NVML's first enumeration has no UUID to serve), and a demo beside the suite's other workers took 20 s to start.
LOST_AFTER_S = 45


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """GPU 6 lost once the daemon has seen it; the first checkpoint after the tests."""
    daemon = start_daemon(tmp_path_factory.mktemp("top"), ["--incident", "gpu-lost", "--incident-after",
                                                           str(LOST_AFTER_S), "--checkpoint-every", "600"],
                          command="demo")
    try:
        wait_until(lambda: 'trainmon_gpu_up{gpu="6",' in (text := daemon.get("/metrics").text)
                   and samples(text, "trainmon_gpu_up", gpu="6") == {(("gpu", "6"), ("uuid", LOST_UUID)): 0.0},
                   timeout=LOST_AFTER_S + 180, interval=0.5)
        yield daemon
    finally:
        daemon.stop()


def top(demo: Daemon, *args: str) -> list[str]:
    return [sys.executable, "-m", "trainmon", "top", "--url", f"http://127.0.0.1:{demo.port}", *args]


def check_screen(text: str) -> None:
    """Every GPU, GPU 6 down and GPU 3 with its XID's verdict, every rank with its rates and loss, and the
    failing list."""
    gpus = {m[0]: m[1:] for m in GPU_ROW.findall(text)}
    assert [str(i) for i in range(8)] == sorted(gpus), text
    assert ("-", "-", "-", "-", "reboot") == gpus["6"][:5], text
    for i, (util, _, memory, _, health, owner) in gpus.items():
        assert "slurm 4242" in owner, f"GPU {i}'s owner\n{text}"
        if i != "6":
            # The demo raises XID 13 on GPU 3 2 s into watching: restart the application, for 10 minutes.
            assert (True, True, "restart_app" if i == "3" else "none") == \
                (util.endswith("%"), memory.endswith("GiB"), health), f"GPU {i}\n{text}"
    ranks = {(m[0], m[1]): m[2:] for m in RANK_ROW.findall(text)}
    # The smoke test's rank is served for --exited-rank-retention (60 s) after it exits, whose end a busy
    # machine may reach before the screen; while it is there it is exited, without rates.
    if (smoke := ranks.pop((SMOKE_TEST, "0"), None)) is not None:
        assert ("0", "-", "-", "-", "-", "exited") == (*smoke[:5], smoke[6]), text
    assert [(JOB, str(i)) for i in range(8)] == sorted(ranks), text
    for (_, rank), (gpu, step, steps_per_s, comm, data, loss, phase) in ranks.items():
        assert (gpu, phase) == (rank, "-"), f"rank {rank}\n{text}"
        assert (True, True, True, True) == (step.endswith("ms"), float(steps_per_s) > 0, comm.endswith("%"),
                                            data.endswith("%")), f"rank {rank}'s rates\n{text}"
        assert float(loss) > 0, f"rank {rank}'s loss\n{text}"
    failing = text.split("Failing:", 1)[-1]
    for line in ("GPU 3 needs restart_app", "GPU 6 is not answering NVML", "GPU 6 needs reboot"):
        assert line in failing, f"{line!r} not failing\n{text}"
    assert SMOKE_TEST not in failing, text


def test_once_prints_one_plain_screen_and_exits_1_when_something_fails(demo: Daemon) -> None:
    done = subprocess.run(top(demo, "--once", "--window", WINDOW), capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={k: v for k, v in os.environ.items() if k != "COLUMNS"})

    assert (1, "") == (done.returncode, done.stderr), done.stdout
    assert "\x1b[" not in done.stdout  # not a terminal: no colours, no cursor moves
    assert 1 == done.stdout.count(HEADER) and "SIMULATED" in done.stdout
    check_screen(done.stdout)


def test_once_says_in_one_line_when_no_daemon_answers() -> None:
    done = subprocess.run([sys.executable, "-m", "trainmon", "top", "--once", "--url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)

    assert (2, "") == (done.returncode, done.stdout)
    assert 1 == len(done.stderr.splitlines()), done.stderr
    assert done.stderr.startswith("trainmon top: cannot reach the trainmon daemon at http://127.0.0.1:9: ")
    assert "--url" in done.stderr


def test_the_live_view_refreshes_in_place_in_a_terminal(demo: Daemon) -> None:
    """In a 160x60 pseudo-terminal: colours, the screen redrawn in place, later collections shown, and a
    clean exit on Ctrl-C."""
    controller, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 160, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in {"NO_COLOR", "COLUMNS", "LINES"}}
    # A shell starts a background job with SIGINT ignored, and a child inherits that: top would never see Ctrl-C
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(top(demo, "--interval", "1", "--window", WINDOW), stdin=terminal, stdout=terminal,
                                   stderr=terminal, cwd=REPO, env={**env, "TERM": "xterm-256color"},
                                   start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    os.close(terminal)
    seen = bytearray()

    def a_whole_screen_with_rates() -> str:
        """The newest complete screen whose ranks have stepped within the window (the demo steps slowly on a
        busy machine), once the view has shown two collections; raises until there is one."""
        seen.extend(read(controller))
        text = ANSI.sub("", seen.decode(errors="replace"))
        if len(set(re.findall(r"collected (\d\d:\d\d:\d\d)", text))) < 2:
            raise AssertionError("one collection shown so far")
        *complete, _ = text.split(HEADER)
        for screen in reversed(complete[1:]):
            if "steps/s" in screen and " ms " in screen and "Failing:" in screen:
                check_screen(screen)
                return screen
        raise AssertionError("no complete screen with rates yet")

    try:
        # gives up only when no refresh ever shows it; the first that does ends the wait
        screen = wait_until(a_whole_screen_with_rates, timeout=240, interval=0.5)
    finally:
        process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            seen.extend(read(controller))  # top writes as it exits: an undrained terminal would block it there
        code = process.wait(timeout=5)
        seen.extend(read(controller))
        os.close(controller)
    output = seen.decode(errors="replace")

    assert 0 == code, output
    assert "\x1b[1m" in output and "\x1b[31m" in output  # bold, red: a colour terminal
    assert "\x1b[2K" in output and "\x1b[1A" in output  # each refresh erases and rewrites the lines above
    assert isinstance(screen, str) and "GPU 6 is not answering NVML" in screen


def read(fd: int) -> bytes:
    """What the terminal has written so far (up to 0.2 s of waiting); b"" once it is closed."""
    chunks = b""
    deadline = time.monotonic() + 0.2
    while (left := deadline - time.monotonic()) > 0 and select.select([fd], [], [], left)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        chunks += chunk
    return chunks
