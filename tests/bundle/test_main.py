"""`python -m bundle`: the one generator CLI writes the rules, the alerts, the dashboards and the mixin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bundle.__main__ import REPO

GENERATED = ("prometheus/rules.yml", "prometheus/alerts.yml", "grafana/dashboards", "mixin")


def committed_outputs() -> set[Path]:
    return {p.relative_to(REPO) for name in GENERATED for p in [REPO / name, *(REPO / name).rglob("*")]
            if p.is_file() and p.suffix in {".yml", ".json", ".libsonnet"}}


def run_rulegen(root: Path, *args: str) -> set[Path]:
    subprocess.run([sys.executable, "-m", "bundle", "--root", str(root), *args], cwd=REPO, check=True)
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file()}


def test_one_run_writes_every_committed_generated_file_as_committed(tmp_path: Path) -> None:
    written = run_rulegen(tmp_path)

    assert committed_outputs() == written
    assert [] == [str(p) for p in written if (tmp_path / p).read_text() != (REPO / p).read_text()]


def test_the_selector_re_targets_the_rules_and_the_dashboards_in_the_same_run(tmp_path: Path) -> None:
    run_rulegen(tmp_path, "--selector", 'job="gpu-nodes"')
    paths = ("prometheus/rules.yml", "prometheus/alerts.yml", "grafana/dashboards/trainmon-node.json")
    texts = {p: (tmp_path / p).read_text().replace('\\"', '"') for p in paths}  # JSON escapes the quotes

    assert dict.fromkeys(texts, True) == {p: 'job="gpu-nodes"' in text for p, text in texts.items()}
    assert dict.fromkeys(texts, False) == {p: 'job="trainmon"' in text for p, text in texts.items()}


def test_there_is_one_generator_entry_point() -> None:
    entry_points = sorted(str(p.relative_to(REPO)) for d in ("bundle", "prometheus", "grafana")
                          for p in (REPO / d).rglob("*.py")
                          if p.name == "__main__.py" or "__name__ == \"__main__\"" in p.read_text())

    assert ["bundle/__main__.py"] == entry_points
