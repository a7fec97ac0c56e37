"""The README's first block, run as a new user meets it: root on a fresh Debian 12 with nothing but the base
system, in a clean copy of the checkout, until `/metrics` answers; then once more, as a second run would."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.net import free_port
from tests.setup.debian import (
    COLD_BUILD_TIMEOUT_S,
    chroot_command,
    chroot_environment,
    copy_into,
    git_archive_into,
    mounts_under,
    prepare_pip,
    readme_blocks,
    remove_rootfs,
    unpack,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(COLD_BUILD_TIMEOUT_S)]

REPO = Path(__file__).resolve().parents[2]
CHECKOUT = "/root/trainmon"
BLOCK_DEADLINE_S = 600.0


@dataclass
class TracedRun:
    """The lines a `sh -x` run printed, each with the seconds since it started."""

    lines: list[tuple[float, str]] = field(default_factory=list)

    def commands(self) -> list[tuple[float, str]]:
        return [(at, line[2:]) for at, line in self.lines if line.startswith("+ ")]

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def metrics_or_none(port: int) -> str | None:
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept": "text/plain"}, timeout=5)
    except httpx.HTTPError:
        return None
    return response.text if response.status_code == 200 else None


def run_until_metrics(root: Path, script: str, port: int, pip_env: dict[str, str]) -> tuple[TracedRun, float, str]:
    """Run `script` in the chroot until the daemon it starts answers `/metrics` on `port`, then stop it all.

    Returns the trace, the seconds until `/metrics` answered, and what it served.
    """
    run = TracedRun()
    started = time.monotonic()
    process = subprocess.Popen(chroot_command(root, script), env=chroot_environment(port, pip_env),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            run.lines.append((time.monotonic() - started, line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while (text := metrics_or_none(port)) is None:
            assert process.poll() is None, f"the block exited {process.returncode}:\n{run.text()[-6000:]}"
            assert time.monotonic() - started < BLOCK_DEADLINE_S, f"no /metrics yet:\n{run.text()[-6000:]}"
            time.sleep(1)
        return run, time.monotonic() - started, text
    finally:
        stop_group(process)
        reader.join(timeout=10)  # the pipe ends with the group
        if process.stdout is not None and not reader.is_alive():
            process.stdout.close()


def stop_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM to everything the block started (its own session), SIGKILL what outlives 30 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):  # all of it gone already
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


def collector_success(text: str) -> dict[str, float]:
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "trainmon_collector_success"]
    return {s.labels["collector"]: s.value for s in family.samples}


def print_timings(name: str, run: TracedRun, answered_s: float) -> None:
    commands = run.commands()
    print(f"\nREADME block 1, {name} run: /metrics answered after {answered_s:.0f} s")
    for (at, command), (next_at, _) in zip(commands, [*commands[1:], (answered_s, "")], strict=True):
        print(f"  {next_at - at:6.1f} s  {command}")


def test_readme_first_block_serves_metrics_on_a_fresh_debian(minbase_tarball: Path, tmp_path: Path) -> None:
    """Fresh Debian 12 (no pip, no venv, PEP 668): the block installs what it needs and `trainmon serve`
    answers, every collector succeeding (the GPU collector with no data: no NVIDIA device, no NVML here); a second
    run of the same block works too."""
    block = readme_blocks((REPO / "README.md").read_text())[0]
    root = unpack(minbase_tarball, tmp_path / "rootfs")
    try:
        assert not (root / "usr/bin/python3").exists()  # really the base system
        git_archive_into(REPO, root / CHECKOUT.lstrip("/"))
        copy_into(root, [Path("/etc/resolv.conf")])
        pip_env = prepare_pip(root, os.environ, Path.home())
        script = f"cd {CHECKOUT}\n{block}"

        first, first_s, first_metrics = run_until_metrics(root, script, free_port(), pip_env)
        print_timings("first", first, first_s)
        second, second_s, second_metrics = run_until_metrics(root, script, free_port(), pip_env)
        print_timings("second", second, second_s)

        for served in (first_metrics, second_metrics):
            success = collector_success(served)
            assert {"gpu": 1.0, "nvme": 1.0, "infiniband": 1.0, "training": 1.0} == {
                k: success[k] for k in ("gpu", "nvme", "infiniband", "training")}
        assert "trainmon serve" in first.commands()[-1][1]
        assert mounts_under(root, Path("/proc/self/mountinfo").read_text()) == []
    finally:
        remove_rootfs(root)
