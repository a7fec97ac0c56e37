"""`trainmon diagnose` names the storage tier: a `trainmon demo --incident storage-slow` (its Lustre mount's
RPCs 20x slower with timeouts, the job waiting for data) and a healthy demo, scraped by a real Prometheus
2.42 without the recording rules, diagnosed by the real CLI. The gloo jobs of test_diagnose.py have no
network file system: their data-loader-bound job stays `data_loading`, and their communication-bound one
`communication`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.alerting_stack import prometheus
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import free_port
from tests.helpers.tools import require_tool
from trainmon.demo.job import JOB_ID
from trainmon.simulation.incidents import SLOW_MOUNT

pytestmark = pytest.mark.slow

# The incident fills the last window, the window before it is healthy: diagnose compares the two (15 scrapes each).
WINDOW_SECONDS = 30
# The healthy run before the incident. Its clock starts when the demo's process builds its plan, before the demo
# serves: the window before the incident must hold scrapes of the healthy run, so the healthy run must outlast the
# start-up by a window. With 30 s, a loaded CI run whose demo took more than 26 s between the two never had one.
HEALTHY_SECONDS = 2 * WINDOW_SECONDS
EVIDENCE = {"rpc_latency_seconds", "rpc_latency_before_seconds", "rpc_timeouts"}


def diagnose(url: str, job_id: str) -> tuple[int, dict[str, object]]:
    done = subprocess.run([sys.executable, "-m", "trainmon", "diagnose", "--prometheus", url, "--job", job_id,
                           "--since", f"{WINDOW_SECONDS}s", "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_a_slow_lustre_mount_is_storage_with_its_mount_and_a_healthy_demo_is_not(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    binary = require_tool("prometheus")
    ports = {"slow": free_port(), "healthy": free_port()}
    with prometheus(binary, tmp_path, [f"127.0.0.1:{p}" for p in ports.values()], [], "http://127.0.0.1:9",
                    "2s") as prom:
        for name in ("healthy", "slow"):  # the slow one last: its clock is the one the windows follow
            (tmp_path / name).mkdir()
            args = ["--incident", "storage-slow", "--incident-after", str(HEALTHY_SECONDS)] if name == "slow" else []
            started = time.monotonic()
            daemons.append(start_daemon(tmp_path / name, args, command="demo", port=ports[name]))
        # The incident starts 60 s into the demo's run, which begins after its imports (seconds on a loaded machine):
        # diagnose every few seconds from 15 s into the incident until its window holds the incident and the window
        # before it the healthy run.
        time.sleep(max(0.0, started + HEALTHY_SECONDS + 15 - time.monotonic()))
        deadline = started + HEALTHY_SECONDS + WINDOW_SECONDS + 120
        while True:
            slow_rc, slow = diagnose(prom.url, f"{JOB_ID}-storage-slow")
            findings = slow["findings"]
            assert isinstance(findings, list)
            # the timeouts may move a look before the latency does (a CI run broke off with the timeouts alone)
            if any(f["cause"] == "storage" and f["signals"].keys() >= EVIDENCE for f in findings) \
                    or time.monotonic() > deadline:
                break
            time.sleep(2)
        _, healthy = diagnose(prom.url, JOB_ID)  # on a loaded machine it may find other causes; never storage

    storage = next((f for f in findings if f["cause"] == "storage"), None)
    assert storage is not None, findings
    assert (1, SLOW_MOUNT, f"127.0.0.1:{ports['slow']}") == (slow_rc, storage["mount"], storage["instance"])
    assert storage["signals"].keys() >= EVIDENCE, storage
    assert storage["signals"]["rpc_latency_seconds"] > 2 * storage["signals"]["rpc_latency_before_seconds"]
    assert storage["signals"]["rpc_timeouts"] > 0
    assert {"signal": "fs_latency", "instance": storage["instance"], "device": SLOW_MOUNT} in storage["hardware"]
    assert "data_loading" not in [f["cause"] for f in findings]
    assert [] == [f for f in healthy["findings"] if f["cause"] == "storage"]  # type: ignore[attr-defined]
