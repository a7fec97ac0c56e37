"""Every Fleet dashboard query reads recording rules, never raw per-GPU or per-port series (issue 17); a "by
node" panel draws the same few nodes at every step, evaluated by promtool (issue 31)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from grafana.dashgen.fleet import TOP_NODES

from tests.grafana.dashboards import DASHBOARD_DIR, data_panels, exprs, load, substitute
from tests.helpers.tools import require_tool
from tests.prometheus.rulefiles import PROMETHEUS, rules

SELECTED_NAME = re.compile(r"([A-Za-z_:][\w:]*)\s*\{")
# Prometheus's own series: one per target and one per firing alert, not per GPU.
PROMETHEUS_SERIES = {"up", "ALERTS"}


def fleet_series() -> list[tuple[str, str]]:
    """(query, series name) of every selector in the Fleet dashboard."""
    return [(expr, name) for expr in exprs(load(DASHBOARD_DIR / "trainmon-fleet.json"))
            for name in SELECTED_NAME.findall(expr)]


def test_every_fleet_query_selects_a_series() -> None:
    queries = exprs(load(DASHBOARD_DIR / "trainmon-fleet.json"))

    assert queries
    assert [q for q in queries if not SELECTED_NAME.search(q)] == []


def test_fleet_panels_read_recorded_series_only() -> None:
    raw = [(expr, name) for expr, name in fleet_series() if ":" not in name and name not in PROMETHEUS_SERIES]

    assert raw == []


def test_every_recorded_series_the_fleet_reads_is_a_shipped_rule() -> None:
    recorded = {rule["record"] for rule in rules(PROMETHEUS / "rules.yml")}

    assert {name for _, name in fleet_series() if ":" in name} - recorded == set()


def node_lines(title: str) -> str:
    """The query of a panel's first line, as Grafana sends it for a 10-minute range."""
    [panel] = [p for p in data_panels(load(DASHBOARD_DIR / "trainmon-fleet.json")) if p["title"] == title]
    return substitute(panel["targets"][0]["expr"], time_range="10m")


@pytest.mark.parametrize(("title", "series", "lowest"), [
    ("Failing collectors", "instance:trainmon_collector_failures:count", False),
    ("Least active nodes", "instance:trainmon_gpu_sm_utilization_ratio:avg", True),
])
def test_a_by_node_panel_draws_the_nodes_that_led_anywhere_in_the_range(tmp_path: Path, title: str, series: str,
                                                                       lowest: bool) -> None:
    """Twelve nodes hold the values 1 to 12 (`lowest`: their negatives, as SM activity) throughout; node n00 leads
    the fleet only in the range's first minutes. The panel draws n00 and the nine other leaders at the range's
    end, where n00 is back in the pack: a `topk` at each step would draw n02 there instead."""
    promtool = require_tool("promtool")
    sign = -1 if lowest else 1
    nodes = {f"n{i:02}": f"{sign * i} " * 11 for i in range(1, 12)}
    nodes["n00"] = f"{sign * 100} " * 3 + "0 " * 8
    expected = ["n00", *[f"n{i:02}" for i in range(3, 12)]]
    test_file = tmp_path / "fleet.test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": f'{series}{{job="trainmon",instance="{node}"}}', "values": values.strip()}
                         for node, values in nodes.items()],
        "promql_expr_test": [{"expr": node_lines(title), "eval_time": "10m", "exp_samples": [
            {"labels": f'{{instance="{node}"}}', "value": 0 if node == "n00" else sign * int(node[1:])}
            for node in expected]}]}]}))

    result = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60)

    assert len(expected) == TOP_NODES
    assert 0 == result.returncode, result.stdout + result.stderr
