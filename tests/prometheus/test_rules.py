"""The shipped rules: promtool accepts and tests them, they are generated, and they follow the mixin style."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from grafana.dashgen.build import DASHBOARDS
from prometheus.rulegen.config import RulesConfig
from prometheus.rulegen.render import rule_files

from tests.helpers.tools import require_tool
from tests.prometheus.rulefiles import PROMETHEUS, RULE_FILES, RULE_TESTS, RUNBOOK, alert_rules, load, rules

SPEC_ALERTS = {
    "TrainmonExporterDown", "TrainmonCollectorFailing", "TrainmonGPULost", "TrainmonGPUXidCritical",
    "TrainmonGPUEccUncorrectable", "TrainmonGPUThermalThrottle", "TrainmonGPUMemoryPressure",
    "TrainmonGPUIdleDuringTraining", "TrainmonCommunicationBound", "TrainmonTrainingStalled",
    "TrainmonRankLost", "TrainmonThroughputRegression", "TrainmonStragglerRank", "TrainmonLossScaleCollapse",
    "TrainmonLossNonFinite", "TrainmonDataLoaderBound", "TrainmonInfinibandLinkDown", "TrainmonInfinibandErrors",
    "TrainmonNVMeLatencyHigh", "TrainmonCollectiveHang",
}  # fmt: skip
SEVERITIES = {"critical", "warning", "info"}
RECORD_NAME = re.compile(r"^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$")


def test_promtool_check_rules_passes() -> None:
    """promtool parses every expression and template; its lint (duplicate rules) is fatal."""
    promtool = require_tool("promtool")

    result = subprocess.run(
        [promtool, "check", "rules", "--lint-fatal", *map(str, RULE_FILES)], capture_output=True, text=True
    )

    assert 0 == result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(test_file: Path) -> None:
    """Each alert fires on a realistic series and stays silent on a healthy one (Debian promtool 2.42)."""
    promtool = require_tool("promtool")

    result = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True)

    assert 0 == result.returncode, result.stdout + result.stderr


def test_committed_rule_files_equal_the_generator_output() -> None:
    """rules.yml and alerts.yml are what `python -m prometheus.rulegen` writes."""
    generated = rule_files(RulesConfig())

    assert {name: (PROMETHEUS / name).read_text() for name in generated} == generated


def test_the_selector_is_a_parameter() -> None:
    """Another scrape job name reaches every raw-metric selector, and the default one is gone."""
    generated = "".join(rule_files(RulesConfig(selector='job="gpu-nodes"')).values())

    assert 'job="trainmon"' not in generated
    assert not re.findall(r"\btrainmon_[a-z_]+\{(?!job=\"gpu-nodes\")", generated)
    assert not re.findall(r"\bup\{(?!job=\"gpu-nodes\")", generated)


def test_every_spec_alert_exists() -> None:
    assert SPEC_ALERTS <= {rule["alert"] for rule in alert_rules()}


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_style(rule: dict[str, object]) -> None:
    """Mixin guide: Trainmon prefix, CamelCase, a known severity, summary, description and a runbook anchor."""
    annotations = rule["annotations"]
    assert isinstance(annotations, dict)

    assert re.fullmatch(r"Trainmon[A-Z][A-Za-z0-9]+", str(rule["alert"]))
    assert rule["labels"]["severity"] in SEVERITIES  # type: ignore[index]
    assert {"summary", "description", "runbook_url"} <= annotations.keys()
    assert annotations["summary"][0].isupper() and annotations["summary"].endswith(".")
    assert annotations["runbook_url"].endswith("docs/runbook.md#" + str(rule["alert"]).lower())


def test_every_runbook_anchor_exists() -> None:
    """Each alert has a `## <AlertName>` section in docs/runbook.md (GitHub anchors are lower case)."""
    headings = set(re.findall(r"^## (\S+)$", RUNBOOK.read_text(), flags=re.MULTILINE))

    assert {rule["alert"] for rule in alert_rules()} <= headings


def test_recording_rule_names_are_level_metric_operations() -> None:
    names = [rule["record"] for rule in rules(PROMETHEUS / "rules.yml")]

    assert [n for n in names if not RECORD_NAME.match(n)] == []
    assert len(names) == len(set(names))


def test_every_recording_rule_is_used() -> None:
    """Each recorded series feeds an alert, a dashboard or another recording rule."""
    recorded = [rule["record"] for rule in rules(PROMETHEUS / "rules.yml")]
    readers = [rule["expr"] for path in RULE_FILES for rule in rules(path)]
    readers += [path.read_text() for path in DASHBOARDS.glob("*.json")]

    unused = [name for name in recorded if not any(re.search(rf"\b{re.escape(name)}\b", r) for r in readers)]

    assert unused == []


def test_every_alert_has_a_firing_and_a_silent_unit_test() -> None:
    """Across prometheus/tests/, each alert name is asserted both firing and not firing."""
    firing: set[str] = set()
    silent: set[str] = set()
    for test_file in RULE_TESTS:
        for case in load(test_file)["tests"]:
            assert "interval" in case, f"{test_file.name}: {case['name']} has no interval (promtool 2.42 needs it)"
            for check in case.get("alert_rule_test", []):
                (firing if check["exp_alerts"] else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules()}

    assert (names - firing, names - silent) == (set(), set())


def test_groups_are_listed_after_the_groups_they_read() -> None:
    """A rule reads only series recorded before it in file order, so that order is an evaluation order."""
    recorded: set[str] = set()
    late = []
    for path in RULE_FILES:
        for group in load(path)["groups"]:
            for rule in group["rules"]:
                read = set(re.findall(r"\b\w+:\w+:\w+\b", rule["expr"]))
                late += [(group["name"], name) for name in read - recorded]
                if "record" in rule:
                    recorded.add(rule["record"])

    assert late == []


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_tests_evaluate_the_groups_in_file_order(test_file: Path) -> None:
    """promtool evaluates groups in random order unless told; chained groups then pass or fail by chance."""
    groups = [group["name"] for path in RULE_FILES for group in load(path)["groups"]]

    assert load(test_file).get("group_eval_order") == groups
