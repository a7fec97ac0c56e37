"""Every Fleet dashboard query reads recording rules, never raw per-GPU or per-port series (issue 17)."""

from __future__ import annotations

import re

from tests.grafana.dashboards import DASHBOARD_DIR, exprs, load
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
