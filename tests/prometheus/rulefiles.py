"""Paths and loaders for the shipped rule files and their promtool tests."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml
from prometheus.rulegen.xid_catalog import GROUP as XID_CATALOG_GROUP
from prometheus.rulegen.xid_catalog import SERIES as XID_CATALOG

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
    with tempfile.TemporaryDirectory(prefix="promtool-") as scratch:
        runnable = test_file if XID_CATALOG in test_file.read_text() else without_xid_catalog(test_file,
                                                                                              Path(scratch))
        result = subprocess.run([require_tool("promtool"), "test", "rules", str(runnable)], capture_output=True,
                                text=True)
    assert 0 == result.returncode, result.stdout + result.stderr


def without_xid_catalog(test_file: Path, scratch: Path) -> Path:
    """A copy of `test_file` in `scratch` over the shipped rules less the XID catalogue group: NVIDIA's Xid table
    as 172 constant recording rules that no other rule reads (test_rules.py checks), a third of promtool's work on
    every test file. Only a test file that queries the table evaluates them."""
    rule_files_without_xid_catalog(scratch)
    document = yaml.load(test_file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    document["rule_files"] = ["rules.yml" if name == "../rules.yml" else str((test_file.parent / name).resolve())
                              for name in document["rule_files"]]
    document["group_eval_order"].remove(XID_CATALOG_GROUP)
    (copy := scratch / test_file.name).write_text(
        yaml.dump(document, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False, width=1 << 20))
    return copy


def rule_files_without_xid_catalog(scratch: Path) -> list[Path]:
    """`RULE_FILES`, the recording rules less the XID catalogue group written into `scratch`."""
    document = load(PROMETHEUS / "rules.yml")
    document["groups"] = [g for g in document["groups"] if g["name"] != XID_CATALOG_GROUP]
    (recording := scratch / "rules.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    return [recording, PROMETHEUS / "alerts.yml"]
