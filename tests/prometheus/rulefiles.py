"""Paths and loaders for the shipped rule files and their promtool tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.tools import require_tool

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "prometheus"
RULE_FILES = (PROMETHEUS / "rules.yml", PROMETHEUS / "alerts.yml")
RULE_TESTS = sorted((PROMETHEUS / "tests").glob("*.test.yml"))
# Hours of 64-rank series (instability_scenarios.py writes both): promtool takes minutes on each on a loaded
# 2-core machine, so each is a test file's of its own (test_instability.py, test_causes_scenarios.py).
INSTABILITY_TESTS = PROMETHEUS / "tests" / "instability.test.yml"
CAUSES_TESTS = PROMETHEUS / "tests" / "causes.test.yml"
SCENARIO_TESTS = (INSTABILITY_TESTS, CAUSES_TESTS)
# What a scenario file's promtool run may take: 1.5 minutes alone, past 5 beside the rest of a cold CI run.
SCENARIO_TIMEOUT_S = 1200
RUNBOOK = REPO / "docs" / "runbook.md"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def rules(path: Path) -> list[dict[str, Any]]:
    return [rule for group in load(path)["groups"] for rule in group["rules"]]


def alert_rules() -> list[dict[str, Any]]:
    return rules(PROMETHEUS / "alerts.yml")


def group_names() -> list[str]:
    """Every rule group, in file order: the `group_eval_order` promtool tests need."""
    return [group["name"] for path in RULE_FILES for group in load(path)["groups"]]


def assert_promtool_tests_pass(test_file: Path) -> None:
    result = subprocess.run([require_tool("promtool"), "test", "rules", str(test_file)], capture_output=True,
                            text=True)
    assert 0 == result.returncode, result.stdout + result.stderr
