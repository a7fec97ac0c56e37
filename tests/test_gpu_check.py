"""scripts/gpu_check.sh and gpu_check.py on a machine without a GPU: they explain themselves, refuse clearly,
and a check records its failures part by part instead of losing the run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pynvml
import pytest

from tests.fake_nvml import scenario as scenarios
from tests.fake_nvml.fixtures import fake_nvml_before_r565_dir  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def cpu_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OUT": str(tmp_path)}


def test_help_lists_every_check() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)

    assert 0 == done.returncode
    assert all(name in done.stdout for name in load().CHECKS)
    assert "8 minutes" in done.stdout


def test_without_cuda_the_shell_script_refuses_and_says_why_in_the_summary(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True,
                          timeout=120, env=cpu_env(tmp_path))

    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert 2 == done.returncode
    assert "no CUDA device" in summary["refused"] and "refused: no CUDA device" in done.stderr


def test_a_check_on_cpu_records_each_failing_part_and_keeps_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    """The env check in its own process: the GPU name fails (no CUDA), the versions are still there."""
    gpu_check = load()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")

    outcome = gpu_check.run_child("env", gpu_check.CHECKS["env"], 120)

    assert 0 == outcome["returncode"] and "error" not in outcome
    result = outcome["result"]
    assert "error" in result["gpu"]
    assert result["torch"] and result["importable"]["pynvml"] is True


def test_the_nvml_check_reads_a_driver_through_the_collector(tmp_path: Path, fake_nvml_before_r565_dir: Path,  # noqa: F811
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The nvml check on the C fake built as a driver before R565 (its load thread finds no CUDA here): every
    collector cycle answers with its cost and skipped lines, the legacy temperature call answers, the R565 one
    is recorded as missing, and the fields the driver did not answer are listed with their return codes."""
    gpu_check = load()
    scenario = scenarios.node(2)
    del scenario["gpus"][0]["fields"][str(scenarios.FIELD["energy_mj"])]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_nvml_before_r565_dir))
    monkeypatch.setenv("FAKE_NVML_SCENARIO", str(scenarios.write(tmp_path / "scenario.json", scenario)))

    outcome = gpu_check.run_child("nvml", gpu_check.CHECKS["nvml"], 120)

    result = outcome["result"]
    assert [True] * 4 == ["seconds" in c and "error" not in c for c in result["collector_cycles"]]
    assert ("gpu 0,1 temperature (falls back to nvmlDeviceGetTemperature): nvmlDeviceGetTemperatureV is not in "
            "this driver") in result["collector_cycles"][-1]["skipped"]
    assert (40, "NVMLError_FunctionNotFound(13)") == (result["temperature"], result["temperature_v"]["error"])
    assert 3 == result["fields"]["not_success"][f"{pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION}@0"]
