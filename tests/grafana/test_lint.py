"""grafana/dashboard-linter's rules over every committed dashboard, panel and target, with the linter's
`.lint`-style exclusions: each names the rule, the dashboard, the panels, and why.

The rules (dashboard-linter docs/rules/): template-datasource, template-job, template-instance,
template-label-promql, template-on-time-change-reload, panel-datasource, panel-title-description,
panel-units, target-promql (test_dashboards.py runs promtool), target-rate-interval, target-job,
target-instance.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.grafana.dashboards import DASHBOARD_FILES, data_panels, load

Board = dict[str, Any]
SELECTOR = re.compile(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\{([^}]*)\}")
RANGE = re.compile(r"\[([^\]:]+)\]")


@dataclass(frozen=True, slots=True)
class Exclusion:
    reason: str
    problems: str = ""  # a pattern of the problems excluded ("<panel>: <what>"); empty: all of them


EXCLUSIONS = {
    ("trainmon-fleet", "template-instance"): Exclusion("The fleet dashboard sums over every node; the node "
                                                       "dashboard is the per-instance view."),
    ("trainmon-fleet", "target-instance"): Exclusion("The fleet dashboard sums over every node."),
    ("trainmon-training-job", "target-instance"): Exclusion(
        "Job-level series are recorded per job_id across nodes and have no instance label; every per-rank "
        "selector matches $instance.", problems=r'.*: job="trainmon", job=~"\$job", job_id=~"\$job_id"'),
}


def variable(board: Board, name: str) -> dict[str, Any] | None:
    return next((v for v in board["templating"]["list"] if v["name"] == name), None)


def selectors(target: dict[str, Any]) -> list[str]:
    return SELECTOR.findall(target["expr"])


def template_datasource(board: Board) -> list[str]:
    ds = variable(board, "datasource")
    if ds is None:
        return ["no datasource variable"]
    wrong = ds["type"] != "datasource" or ds["query"] != "prometheus" or ds["label"].lower() != "data source"
    return [f"datasource variable {ds}"] if wrong else []


def _label_variable(board: Board, name: str) -> list[str]:
    v = variable(board, name)
    if v is None:
        return [f"no {name} variable"]
    problems = []
    if v["label"].lower() != name:
        problems.append(f"{name} variable labelled {v['label']!r}")
    if v["datasource"]["uid"] not in ("$datasource", "${datasource}"):
        problems.append(f"{name} variable's datasource {v['datasource']}")
    if not (v["multi"] and v["includeAll"] and v["allValue"] == ".+"):
        problems.append(f"{name} variable is not multi-select with All = .+")
    if not re.fullmatch(rf"label_values\(.+, {name}\)", v["query"]):
        problems.append(f"{name} variable query {v['query']!r}")
    return problems


def template_job(board: Board) -> list[str]:
    return _label_variable(board, "job")


def template_instance(board: Board) -> list[str]:
    return _label_variable(board, "instance")


def template_label_promql(board: Board) -> list[str]:
    queries = [v for v in board["templating"]["list"] if v["type"] == "query"]
    return [f"{v['name']}: {v['query']!r}" for v in queries
            if not re.fullmatch(r"label_values\([a-z_:]+\{[^}]*\}, \w+\)", v["query"])]


def template_on_time_change_reload(board: Board) -> list[str]:
    return [v["name"] for v in board["templating"]["list"] if v["type"] == "query" and v["refresh"] != 2]


def panel_datasource(board: Board) -> list[str]:
    return [p["title"] for p in data_panels(board) if p["datasource"]["uid"] not in ("$datasource", "${datasource}")]


def panel_title_description(board: Board) -> list[str]:
    return [str(p["id"]) for p in data_panels(board) if not p["title"].strip() or not p.get("description", "").strip()]


def panel_units(board: Board) -> list[str]:
    return [p["title"] for p in data_panels(board) if not p["fieldConfig"]["defaults"].get("unit")]


def target_rate_interval(board: Board) -> list[str]:
    return [f"{p['title']}: {t['expr']}" for p in data_panels(board) for t in p["targets"]
            if re.search(r"\b(rate|irate|increase)\(", t["expr"])
            and set(RANGE.findall(t["expr"])) - {"$__rate_interval"}]


def _matcher(board: Board, label: str) -> list[str]:
    return [f"{p['title']}: {s}" for p in data_panels(board) for t in p["targets"] for s in selectors(t)
            if f'{label}=~"${label}"' not in s]


def target_job(board: Board) -> list[str]:
    return _matcher(board, "job")


def target_instance(board: Board) -> list[str]:
    return _matcher(board, "instance")


RULES: dict[str, Callable[[Board], list[str]]] = {
    "template-datasource": template_datasource,
    "template-job": template_job,
    "template-instance": template_instance,
    "template-label-promql": template_label_promql,
    "template-on-time-change-reload": template_on_time_change_reload,
    "panel-datasource": panel_datasource,
    "panel-title-description": panel_title_description,
    "panel-units": panel_units,
    "target-rate-interval": target_rate_interval,
    "target-job": target_job,
    "target-instance": target_instance,
}
BOARDS = {load(path)["uid"]: load(path) for path in DASHBOARD_FILES}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("uid", BOARDS)
def test_dashboard_lint_rule(uid: str, rule: str) -> None:
    board = BOARDS[uid]
    exclusion = EXCLUSIONS.get((uid, rule))
    problems = RULES[rule](board)
    if exclusion is not None:
        problems = [p for p in problems if not re.fullmatch(exclusion.problems or ".*", p)]

    assert problems == []


def test_every_exclusion_is_needed() -> None:
    """An exclusion that excludes nothing is stale."""
    stale = [key for key, exclusion in EXCLUSIONS.items()
             if not any(re.fullmatch(exclusion.problems or ".*", p) for p in RULES[key[1]](BOARDS[key[0]]))]

    assert stale == []


def test_the_rules_catch_what_they_are_for() -> None:
    """Each rule fails on a dashboard that breaks it (the rules themselves can fail)."""
    board = BOARDS["trainmon-node"]
    broken = {**board, "templating": {"list": [{**v, "label": "Node", "refresh": 1}
                                               for v in board["templating"]["list"]]}}
    panel = {**data_panels(board)[0], "description": "", "datasource": {"uid": "prom"},
             "fieldConfig": {"defaults": {}},
             "targets": [{"expr": 'rate(trainmon_x_total{job="a"}[5m])'}]}
    broken_panels = {**board, "panels": [panel]}

    assert template_instance(broken) == ["instance variable labelled 'Node'"]
    assert template_on_time_change_reload(broken) == ["job", "instance"]
    for rule in (panel_datasource, panel_title_description, panel_units, target_rate_interval, target_job,
                 target_instance):
        assert rule(broken_panels), rule.__name__
