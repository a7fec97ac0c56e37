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

import pytest

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
