from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.daemon import Daemon, start_daemon

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
DAEMON_TIMEOUT_S = 180
SLOW_TIMEOUT_S = 300  # pyproject's `timeout` (60 s) is every other test's
# The longest tests, started first so that each begins at once on a worker of its own (`--dist loadfile`
# hands out one file at a time in this order, so a module-scoped fixture is built once); the suite's wall
# time is then about the longest file.
# On a cold machine the container image's file is the longest (debootstrap, then the image build: about 9
# minutes), so tests/setup/ starts first and the session's Debian root is built at once.
LONGEST_FIRST = ("tests/setup/test_container_image.py", "tests/setup/", "tests/e2e/test_demo_incidents.py",
                 "tests/e2e/test_alerting.py", "tests/bench/", "tests/e2e/")


def _start_order(item: pytest.Item) -> int:
    path = item.nodeid
    for rank, prefix in enumerate(LONGEST_FIRST):
        if path.startswith(prefix):
            return rank
    return len(LONGEST_FIRST) if item.get_closest_marker("slow") else len(LONGEST_FIRST) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`slow` tests get 300 s (a hang costs 1 minute elsewhere, not 10) and run first, longest first; a test that
    starts a daemon gets 180 s (one start took more than a minute beside the eighteen-demo e2e on 2 cores)."""
    for item in items:
        if item.get_closest_marker("timeout") is not None:
            continue
        if item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
        elif "daemons" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(DAEMON_TIMEOUT_S))
    items.sort(key=_start_order)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Variables from a developer's shell or a Slurm allocation must not change results."""
    prefixes = ("TRAINMON_", "SLURM_", "TORCHELASTIC_", "MASTER_ADDR", "MASTER_PORT", "NCCL_", "TORCH_NCCL_")
    for key in [k for k in os.environ if k.startswith(prefixes) and k != "TRAINMON_REQUIRE_TOOLS"]:
        monkeypatch.delenv(key)


@pytest.fixture
def fixtures() -> Path:
    """Real procfs/sysfs samples and CRD schemas copied into tests/fixtures (see each NOTICE.md)."""
    return FIXTURES


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[list[Daemon]]:
    """Daemons started through `start_daemon(tmp_path, ...)` and appended here are stopped after the test."""
    started: list[Daemon] = []
    yield started
    for daemon in started:
        daemon.stop()


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One `trainmon demo --gpu-processes` for the tests that only read it (a test that changes or stops a
    demo starts its own)."""
    daemon = start_daemon(tmp_path_factory.mktemp("demo"), ["--gpu-processes"], command="demo")
    yield daemon
    daemon.stop()
