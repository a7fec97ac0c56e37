from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.daemon import Daemon

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


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
