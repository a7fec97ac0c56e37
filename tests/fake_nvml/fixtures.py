"""pytest fixtures for the C fake; test modules import them by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_nvml.build import build_fake_nvml
from tests.helpers.tools import require_tool


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding a freshly built fake libnvidia-ml.so.1 (gcc: skipped locally, required in CI)."""
    return build_fake_nvml(require_tool("gcc", "cc"), tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture(scope="session")
def fake_nvml_before_r565_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake as a driver before R565: no nvmlDeviceGetTemperatureV symbol at all."""
    return build_fake_nvml(require_tool("gcc", "cc"), tmp_path_factory.mktemp("fake-nvml-r550"),
                           "WITHOUT_TEMPERATURE_V")
