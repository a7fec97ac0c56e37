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


def scratch_checkout(generate: ModuleType, root: Path) -> None:
    for name in generate.checkout_files(REPO):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)


def test_a_hand_edited_output_and_a_generated_name_the_catalogue_does_not_declare_are_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One scratch checkout for both (each regeneration costs about 10 s of CPU)."""
    generate = load_script()
    scratch_checkout(generate, tmp_path)
    alerts = tmp_path / "prometheus" / "alerts.yml"
    alerts.write_text(alerts.read_text().replace("for: 5m", "for: 6m", 1))
    (doc := tmp_path / "docs" / "configuration.md").write_text(doc.read_text() + "a hand edit\n")
    (table := tmp_path / "docs" / "metrics.md").write_text(table.read_text().replace("| Power draw. |", "| Power. |"))
    node = tmp_path / "grafana" / "dashgen" / "node.py"
    node.write_text(node.read_text().replace('f"scrape_duration_seconds{', 'f"trainmon_scrape_seconds{', 1))
    dashboards = ("deploy/kubernetes/base/dashboards/trainmon-node.json", "grafana/dashboards/trainmon-node.json",
                  "mixin/dashboards/dashboards.libsonnet")

    assert 1 == generate.main(["--check", "--root", str(tmp_path)])
    assert sorted(["stale: docs/configuration.md", "stale: docs/metrics.md", "stale: prometheus/alerts.yml",
                   *(f"stale: {path}" for path in dashboards)]) + \
        [f"undeclared: {path}: trainmon_scrape_seconds" for path in dashboards] == capsys.readouterr().out.splitlines()
