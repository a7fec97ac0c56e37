"""Dashboard lint (grafana/dashboard-linter's rules and more) and generated == committed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana.dashgen.build import BUILDERS, DASHBOARDS, dashboard_files
from grafana.dashgen.config import DashboardConfig
from grafana_foundation_sdk.models.dashboard import Dashboard
from prometheus.rulegen.config import RulesConfig

from tests.grafana.dashboards import (
    BUILTIN_VARIABLES,
    DASHBOARD_FILES,
    REPO,
    VARIABLE_USE,
    data_panels,
    exprs,
    load,
    panels,
    substitute,
)
from tests.helpers.tools import require_tool

# Grafana unit ids used here (grafana/grafana packages/grafana-data/src/valueFormats/categories.ts).
UNITS = {"none", "short", "percentunit", "bytes", "binBps", "Bps", "watt", "celsius", "hertz", "s", "iops", "cps",
         "flops", "joule"}
BOARDS = [pytest.param(load(path), id=path.name) for path in DASHBOARD_FILES]


def test_committed_dashboards_equal_the_generator_output() -> None:
    """grafana/dashboards/*.json is exactly what `python -m bundle` writes, and nothing else."""
    generated = dashboard_files()

    assert {p.name: p.read_text() for p in DASHBOARDS.glob("*.json")} == generated
    assert set(BUILDERS) == set(generated)


@pytest.mark.parametrize("board", BOARDS)
def test_dashboard_identity(board: dict[str, Any]) -> None:
    """Stable uid, the shared tag, the pinned schema, and it loads back into the SDK's model."""
    assert re.fullmatch(r"trainmon-[a-z-]+", board["uid"])
    assert "trainmon" in board["tags"]
    assert 41 == board["schemaVersion"]
    assert board["uid"] == Dashboard.from_json(board).uid


@pytest.mark.parametrize("board", BOARDS)
def test_variables(board: dict[str, Any]) -> None:
    """One `datasource` variable; every query variable uses it, is multi-select with `.+` for All or single."""
    variables = board["templating"]["list"]
    datasources = [v for v in variables if v["type"] == "datasource"]
    queries = [v for v in variables if v["type"] == "query"]

    assert [("datasource", "prometheus")] == [(v["name"], v["query"]) for v in datasources]
    assert "job" in {v["name"] for v in queries}
    for v in queries:
        assert "${datasource}" == v["datasource"]["uid"]
        assert 2 == v["refresh"]  # on time range change
        assert not v.get("multi") or ".+" == v["allValue"]


@pytest.mark.parametrize("board", BOARDS)
def test_every_variable_used_is_defined(board: dict[str, Any]) -> None:
    defined = {v["name"] for v in board["templating"]["list"]} | BUILTIN_VARIABLES
    texts = [*exprs(board), *(v.get("query", "") for v in board["templating"]["list"])]
    texts += [p["datasource"]["uid"] for p in data_panels(board)]

    used = {name for text in texts for name in VARIABLE_USE.findall(str(text))}

    assert used - defined == set()


@pytest.mark.parametrize("board", BOARDS)
def test_every_panel_has_a_unit_description_and_the_datasource_variable(board: dict[str, Any]) -> None:
    for panel in data_panels(board):
        assert panel["fieldConfig"]["defaults"]["unit"] in UNITS, panel["title"]
        assert panel.get("description", "").strip(), panel["title"]
        assert "${datasource}" == panel["datasource"]["uid"], panel["title"]
        assert [t["datasource"]["uid"] for t in panel["targets"]] == ["${datasource}"] * len(panel["targets"])
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert ref_ids and all(ref_ids) and len(ref_ids) == len(set(ref_ids)), panel["title"]


@pytest.mark.parametrize("board", BOARDS)
def test_every_range_uses_the_rate_interval(board: dict[str, Any]) -> None:
    """rate()/increase() windows are `$__rate_interval`; recorded `:rate5m` series need none. The range shown
    (`$__range`) is read once, at its end, to rank the nodes a Fleet panel draws (fleet.by_node)."""
    ranges = {r for e in exprs(board) for r in re.findall(r"\[([^\]]+)\]", e)}
    whole_range = [m for e in exprs(board) for m in re.findall(r"\[\$__range\][^)]*\)", e)]

    assert ranges <= {"$__rate_interval", "$__range"}
    assert set(whole_range) <= {"[$__range] @ end()"}
    assert all("$__rate_interval" in e for e in exprs(board) if re.search(r"\b(rate|increase|irate)\(", e))


@pytest.mark.parametrize("board", BOARDS)
def test_every_selector_has_a_job_matcher(board: dict[str, Any]) -> None:
    selectors = [s for e in exprs(board) for s in re.findall(r"[a-zA-Z_:][\w:]*\{[^}]*\}", e)]

    assert selectors
    assert [s for s in selectors if 'job=~"$job"' not in s] == []


def test_the_selector_and_the_idle_threshold_are_the_rules_own() -> None:
    rules, boards = RulesConfig(), DashboardConfig()

    assert (rules.selector, rules.idle_sm_ratio) == (boards.selector, boards.idle_sm_ratio)


def test_the_selector_re_targets_every_query_and_the_job_variable(tmp_path: Path) -> None:
    """`python -m bundle --selector` re-targets the dashboards: every selector and the Job list."""
    subprocess.run([sys.executable, "-m", "bundle", "--selector", 'job="gpu-nodes"',
                    "--root", str(tmp_path)], cwd=REPO, check=True)
    written = tmp_path / DASHBOARDS.relative_to(REPO)
    boards = [load(written / name) for name in BUILDERS]
    selectors = [s for b in boards for e in exprs(b) for s in re.findall(r"[a-zA-Z_:][\w:]*\{[^}]*\}", e)]
    job_lists = [v["query"] for b in boards for v in b["templating"]["list"] if v["name"] == "job"]

    assert selectors
    assert [s for s in selectors if '{job="gpu-nodes", ' not in s] == []
    assert job_lists == ['label_values(trainmon_build_info{job="gpu-nodes"}, job)'] * len(BUILDERS)
    assert not any('job="trainmon"' in (written / name).read_text() for name in BUILDERS)


@pytest.mark.parametrize("board", BOARDS)
def test_panel_ids_are_unique_and_the_layout_fits_the_grid(board: dict[str, Any]) -> None:
    """Ids unique; every panel within 24 columns; no two panels overlap."""
    all_panels = list(panels(board))
    ids = [p["id"] for p in all_panels]
    cells: set[tuple[int, int]] = set()
    for p in all_panels:
        g = p["gridPos"]
        assert g["w"] > 0 and g["h"] > 0 and 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        covered = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not covered & cells, p["title"]
        cells |= covered

    assert len(ids) == len(set(ids))


def test_every_panel_query_parses(tmp_path: Path) -> None:
    """promtool parses each panel expression (variables set to All) as a throw-away recording rule."""
    promtool = require_tool("promtool")
    rules = [
        {"record": "lint:panel:expr", "expr": substitute(expr)}
        for path in DASHBOARD_FILES
        for expr in exprs(load(path))
    ]
    rule_file = tmp_path / "panels.yml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))

    result = subprocess.run([promtool, "check", "rules", "--lint=none", str(rule_file)], capture_output=True, text=True)

    assert 0 == result.returncode, result.stdout + result.stderr


def test_provisioning_points_grafana_at_the_dashboards() -> None:
    """The file provider and the datasource provisioning are well formed."""
    provisioning = REPO / "grafana" / "provisioning"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "trainmon.yml").read_text())["providers"]
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]

    assert ("file", "prometheus") == (provider["type"], datasource["type"])
    assert provider["options"]["path"].startswith("/")
