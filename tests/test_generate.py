"""`python scripts/generate.py`: one command writes every generated file; `--check` finds any stale one."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "generate.py"

# Each step regenerates the whole bundle (about 10 s of CPU): seconds alone, more beside the slow files
pytestmark = pytest.mark.slow


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_file_is_what_the_one_command_writes() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)

    assert (0, "") == (result.returncode, result.stdout), result.stderr


def test_a_hand_edited_output_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generate = load_script()
    for name in generate.checkout_files(REPO):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, tmp_path / name)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    alerts = tmp_path / "prometheus" / "alerts.yml"
    alerts.write_text(alerts.read_text().replace("for: 5m", "for: 6m", 1))
    (doc := tmp_path / "docs" / "configuration.md").write_text(doc.read_text() + "a hand edit\n")

    assert 1 == generate.main(["--check", "--root", str(tmp_path)])
    assert ["stale: docs/configuration.md", "stale: prometheus/alerts.yml"] == capsys.readouterr().out.splitlines()
