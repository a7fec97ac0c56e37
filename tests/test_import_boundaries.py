"""The shape of the package, held in place: who may import what."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "exporter" / "trainmon"
HEAVY = ("fastapi", "uvicorn", "prometheus_client", "pynvml", "trainmon.collectors", "trainmon.http", "psutil")


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
    return modules


@pytest.mark.parametrize("module", ["trainmon", "trainmon.wire", "trainmon.flops", "trainmon.torch", "trainmon.cli",
                                    "trainmon.diagnose"])
def test_light_imports_load_nothing_heavy(module: str) -> None:
    """`import trainmon.torch` runs inside other people's training images: no web stack, no NVML."""
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))"

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)

    assert "[]" == result.stdout.strip()


def test_http_reads_only_the_snapshot() -> None:
    for path in (PACKAGE / "http").glob("*.py"):
        assert not {m for m in imported_modules(path) if m.startswith("trainmon.collectors")}, path


def test_parsers_are_pure() -> None:
    """Parsers import nothing from trainmon but other parsers (shared pure helpers), and do no I/O."""
    for path in (PACKAGE / "parsers").glob("*.py"):
        modules = imported_modules(path)
        assert not {m for m in modules if m.startswith("trainmon") and not m.startswith("trainmon.parsers")}, path
        assert not modules & {"os", "pathlib", "io", "logging", "time"}, path


def test_serving_http_and_reading_nvme_leave_nvml_unloaded() -> None:
    """pynvml is the GPU collector's: rendering, HTTP and the other collectors never load it (ruff TID253)."""
    code = ("import sys, trainmon.http.app, trainmon.exposition, trainmon.collectors.nvme; "
            "print('pynvml' in sys.modules)")

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)

    assert "False" == result.stdout.strip()
