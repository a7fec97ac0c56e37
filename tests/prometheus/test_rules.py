"""The shipped rules: promtool accepts and tests them, they are generated, and they follow the mixin style."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path

import pytest
from grafana.dashgen.build import DASHBOARDS
from prometheus.rulegen.config import RulesConfig
from prometheus.rulegen.model import Group, Record
from prometheus.rulegen.render import rule_files, to_yaml
from prometheus.rulegen.xid_catalog import SERIES as XID_CATALOG

from tests.helpers.tools import require_tool
from tests.prometheus.rulefiles import (
    PROMETHEUS,
    RULE_FILES,
    RULE_TESTS,
    RUNBOOK,
    SCENARIO_TESTS,
    alert_rules,
    assert_promtool_tests_pass,
    case_files,
    checked_names,
    group_names,
    load,
    rule_name,
    rules,
    rules_reading,
)
from trainmon.catalog import undeclared

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


@pytest.mark.parametrize("test_file", [p for p in RULE_TESTS if p not in SCENARIO_TESTS], ids=lambda p: p.name)
def test_promtool_unit_tests_pass(test_file: Path) -> None:
    """Each alert fires on a realistic series and stays silent on a healthy one (Debian promtool 2.42);
    the two long generated ones run in test_instability.py and test_causes_scenarios.py, on workers of their own."""
    assert_promtool_tests_pass(test_file)


def test_the_selector_is_a_parameter() -> None:
    """Another scrape job name reaches every raw-metric selector, and the default one is gone."""
    generated = "".join(rule_files(RulesConfig(selector='job="gpu-nodes"')).values())

    assert 'job="trainmon"' not in generated
    assert not re.findall(r"\btrainmon_[a-z_]+\{(?!job=\"gpu-nodes\")", generated)
    assert not re.findall(r"\bup\{(?!job=\"gpu-nodes\")", generated)


def test_a_rule_reading_an_undeclared_metric_fails_the_generation() -> None:
    typo = Record(record="instance:trainmon_gpu_up:sum", expr="sum without (gpu, uuid) (trainmon_gpu_upp)")

    with pytest.raises(ValueError, match=r"no family declares .*: trainmon_gpu_upp$"):
        to_yaml([Group(name="trainmon.gpu.rules", rules=[typo])])


def test_the_shipped_rules_read_only_declared_metrics() -> None:
    """Every `trainmon_*` name in the committed rule files is a family of trainmon.catalog, or a recorded rule's."""
    assert [] == undeclared(path.read_text() for path in RULE_FILES)


def test_every_spec_alert_exists() -> None:
    assert SPEC_ALERTS <= {rule["alert"] for rule in alert_rules()}


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_style(rule: dict[str, object]) -> None:
    """Mixin guide: Trainmon prefix, CamelCase, a known severity, summary, description, a runbook anchor and
    a dashboard_url to one existing non-row panel of a committed dashboard."""
    annotations = rule["annotations"]
    assert isinstance(annotations, dict)

    assert re.fullmatch(r"Trainmon[A-Z][A-Za-z0-9]+", str(rule["alert"]))
    assert rule["labels"]["severity"] in SEVERITIES  # type: ignore[index]
    assert {"summary", "description", "runbook_url", "dashboard_url"} <= annotations.keys()
    assert annotations["summary"][0].isupper()
    assert annotations["summary"].endswith(".")
    assert annotations["runbook_url"].endswith("docs/runbook.md#" + str(rule["alert"]).lower())
    link = re.fullmatch(re.escape(RulesConfig().grafana_url) + r"/d/([a-z-]+)\?viewPanel=(\d+)"
                        r"(&var-(\w+)=\{\{ \$labels\.\4 \}\})?", annotations["dashboard_url"])
    assert link, annotations["dashboard_url"]
    assert (link[1], int(link[2])) in committed_panels()


@functools.cache
def committed_panels() -> frozenset[tuple[str, int]]:
    """(dashboard uid, panel id) of every panel but rows in grafana/dashboards/."""
    boards = [json.loads(path.read_text()) for path in DASHBOARDS.glob("*.json")]
    return frozenset((board["uid"], panel["id"]) for board in boards for panel in board["panels"]
                     if panel["type"] != "row")


def test_info_alerts_exist_for_what_is_worth_a_ticket() -> None:
    """SPEC §6: `info` alerts for ticket-worthy things, here a pending row remap and a node without the socket."""
    info = {rule["alert"] for rule in alert_rules() if rule["labels"]["severity"] == "info"}  # type: ignore[index]

    assert {"TrainmonGPURowRemapPending", "TrainmonKubeletSocketMissing"} <= info


def test_every_runbook_anchor_exists() -> None:
    """Each alert has a `## <AlertName>` section in docs/runbook.md (GitHub anchors are lower case)."""
    headings = set(re.findall(r"^## (\S+)$", RUNBOOK.read_text(), flags=re.MULTILINE))

    assert {rule["alert"] for rule in alert_rules()} <= headings


def test_recording_rule_names_are_level_metric_operations() -> None:
    """Except the Xid catalogue, whose name is the one the daemon served before (one rule per code, by labels)."""
    recorded = [(rule["record"], tuple(sorted(rule.get("labels", {}).items())))
                for rule in rules(PROMETHEUS / "rules.yml")]
    names = [name for name, _ in recorded if name != XID_CATALOG]

    assert [n for n in names if not RECORD_NAME.match(n)] == []
    assert len(recorded) == len(set(recorded))
    assert 172 == len(recorded) - len(names)


def test_every_recording_rule_is_used() -> None:
    """Each recorded series feeds an alert, a dashboard or another recording rule."""
    recorded = [rule["record"] for rule in rules(PROMETHEUS / "rules.yml")]
    readers = [rule["expr"] for path in RULE_FILES for rule in rules(path)]
    readers += [path.read_text() for path in DASHBOARDS.glob("*.json")]

    unused = [name for name in recorded if not any(re.search(rf"\b{re.escape(name)}\b", r) for r in readers)]

    assert unused == []


def test_a_case_keeps_the_rules_its_alert_reads_through_other_rules() -> None:
    kept = rules_reading({"TrainmonThroughputDrift"})

    assert {"job_id:trainmon_train_steps_per_training_second:best1h",  # read by the alert
            "job_id:trainmon_train_steps_per_training_second:avg1h",  # read by best1h
            "job_id:trainmon_train_steps_per_training_second:rate5m",  # read by avg1h and the alert
            "rank:trainmon_train_step_duration_seconds_count:rate5m",  # read by rate5m
            "rank:trainmon_train_dataloader_wait_seconds:rate5m"} <= kept
    assert not kept & {"TrainmonGPULost", XID_CATALOG, "instance:trainmon_gpu_up:sum"}


def test_a_series_an_annotation_queries_is_kept() -> None:
    """TrainmonStragglerRank's description names the likely cause from another recorded series."""
    assert "rank:trainmon_train_straggler_cause:share" in rules_reading({"TrainmonStragglerRank"})


def test_a_check_of_alerts_by_name_keeps_those_and_one_of_all_alerts_keeps_every_one() -> None:
    named = checked_names({"promql_expr_test": [{"expr": 'count(ALERTS{alertname="TrainmonGPULost"})'}]})
    unnamed = checked_names({"promql_expr_test": [{"expr": 'count(ALERTS{alertstate="firing"})'}]})

    assert {"TrainmonGPULost"} == named & {rule["alert"] for rule in alert_rules()}
    assert {rule["alert"] for rule in alert_rules()} <= unnamed


def test_the_xid_catalogue_is_evaluated_only_where_a_case_queries_it() -> None:
    """172 constant recording rules that no rule reads: a third of promtool's work when every case evaluated them."""
    cases = [case for path in RULE_TESTS for case in load(path)["tests"]]

    evaluating = [case["name"] for case in cases if XID_CATALOG in rules_reading(checked_names(case))]

    assert evaluating == [case["name"] for case in cases if XID_CATALOG in str(case.get("promql_expr_test"))]
    assert evaluating


def test_each_case_file_differs_from_its_test_file_only_in_its_rules(tmp_path: Path) -> None:
    test_file = PROMETHEUS / "tests" / "training.test.yml"
    original = load(test_file)

    files = case_files(test_file, tmp_path)

    assert len(original["tests"]) == len(files)
    for case, path in zip(original["tests"], files, strict=True):
        copy = load(path)
        rule_files = [Path(name) for name in copy.pop("rule_files")]
        groups = {group["name"] for name in rule_files for group in load(name)["groups"]}
        assert [name for name in original["group_eval_order"] if name in groups] == copy.pop("group_eval_order")
        assert {**original, "tests": [case]} == {**copy, "rule_files": original["rule_files"],
                                                 "group_eval_order": original["group_eval_order"]}
        assert rules_reading(checked_names(case)) == {rule_name(rule) for name in rule_files for rule in rules(name)}


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
    assert load(test_file).get("group_eval_order") == group_names()


def test_every_dashboard_link_variable_is_a_label_of_the_firing_alert() -> None:
    """A link sets the node or job variable from the alert's label: each firing unit test shows that label."""
    variables = {str(rule["alert"]): set(re.findall(r"\{\{ \$labels\.(\w+) \}\}", rule["annotations"]["dashboard_url"]))
                 for rule in alert_rules()}  # type: ignore[index]
    checked, missing = 0, []
    for test_file in RULE_TESTS:
        for case in load(test_file)["tests"]:
            for check in case.get("alert_rule_test", []):
                for alert in check["exp_alerts"]:
                    checked += 1
                    labels = alert["exp_labels"].keys()
                    missing += [(check["alertname"], v) for v in variables[check["alertname"]] - labels]

    assert checked
    assert missing == []
    assert {"instance", "job_id"} <= set().union(*variables.values())
