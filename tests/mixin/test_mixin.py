"""mixin/ rendered with the jsonnet Python binding: the defaults give the committed rule files and dashboards,
and an override of one `_config` field gives what the Python generators give for that RulesConfig."""

from __future__ import annotations

import json
import re
from dataclasses import fields, replace
from typing import Any

import _jsonnet
import pytest
import yaml
from bundle.mixin import MIXIN_DIR, dashboard_config, mixin_files
from grafana.dashgen.build import DASHBOARDS, dashboard_files
from prometheus.rulegen.config import RulesConfig
from prometheus.rulegen.render import PROMETHEUS_DIR, rule_files

from tests.deploy.test_kubernetes import OVERLAY, kustomize

# A value other than the default for each RulesConfig field.
CHANGED: dict[str, Any] = {
    "selector": 'job="gpu-nodes", cluster="a"',
    "runbook": "https://wiki.example/trainmon",
    "grafana_url": "https://grafana.example",
    "comm_bound_ratio": 0.33,
    "dataloader_bound_ratio": 0.35,
    "straggler_score_threshold": 0.6,
    "straggler_peer_wait_ratio": 0.12,
    "straggler_individual_window": "2h",
    "straggler_cause_share": 0.7,
    "mfu_dtype": "fp8",
    "stall_seconds": 1800,
    "collective_hang_seconds": 600,
    "throughput_floor_ratio": 0.8,
    "baseline_window": "3h",
    "baseline_offset": "30m",
    "idle_sm_ratio": 0.07,
    "idle_power_ratio": 0.3,
    "critical_xids": (48, 79),
    "xid_firing_seconds": 600,
    "thermal_throttle_ratio": 0.15,
    "nvme_latency_floor_seconds": 0.005,
    "nvme_slow_factor": 20.0,
    "nvme_latency_seconds": 0.02,
    "infiniband_errors": 25,
    "storage_slow_factor": 3.0,
    "storage_dataloader_ratio": 0.2,
    "checkpoint_slow_factor": 4.5,
    "checkpoint_baseline_count": 5,
    "nvlink_errors": 40,
    "loss_diverging_ratio": 1.1,
    "loss_spike_patience": 6,
    "numerics_job_wide_ratio": 0.25,
    "warmup_seconds": 1800,
    "throughput_drift_ratio": 0.05,
    "throughput_drift_lookback": "12h",
    "slow_rank_zscore": 4.0,
    "slow_rank_excess_ratio": 0.05,
    "slow_rank_mad_floor_ratio": 0.01,
    "alert_for": {"TrainmonTrainingStalled": "30m", "TrainmonGPUThermalThrottle": "20m"},
    "group_intervals": {"trainmon.gpu": "1m", "trainmon.fleet.rules": "2m"},
}


def render(config: dict[str, object] | None = None) -> dict[str, Any]:
    """The mixin's rules, alerts and dashboards, with `config` merged into `_config`."""
    override = json.dumps({"_config": config or {}}).replace('"_config":', "_config+::", 1)
    snippet = (f"local m = (import 'mixin.libsonnet') + {override}; "
               "{rules: m.prometheusRules, alerts: m.prometheusAlerts, dashboards: m.grafanaDashboards}")
    return json.loads(_jsonnet.evaluate_snippet("render", snippet, jpathdir=str(MIXIN_DIR)))  # type: ignore[no-any-return]


def generated(config: RulesConfig) -> dict[str, Any]:
    """What the Python generators write for `config`, in the same shape."""
    files = rule_files(config)
    return {"rules": yaml.safe_load(files["rules.yml"]), "alerts": yaml.safe_load(files["alerts.yml"]),
            "dashboards": {name: json.loads(text) for name, text in dashboard_files(dashboard_config(config)).items()}}


def expressions(output: dict[str, Any]) -> dict[str, str]:
    """Every string of the output by its path (rule exprs, annotations, panel queries, variable queries)."""
    found: dict[str, str] = {}

    def walk(value: object, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}/{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}/{i}")
        elif isinstance(value, str):
            found[path] = value

    walk(output, "")
    return found


@pytest.fixture(scope="module")
def default_render() -> dict[str, Any]:
    return render()


def test_default_config_renders_the_committed_rule_files_and_dashboards(default_render: dict[str, Any]) -> None:
    assert yaml.safe_load((PROMETHEUS_DIR / "rules.yml").read_text()) == default_render["rules"]
    assert yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text()) == default_render["alerts"]
    assert {p.name: json.loads(p.read_text()) for p in DASHBOARDS.glob("*.json")} == default_render["dashboards"]


def test_config_fields_are_exactly_rules_configs() -> None:
    snippet = "std.objectFieldsAll((import 'config.libsonnet')._config)"
    names = json.loads(_jsonnet.evaluate_snippet("fields", snippet, jpathdir=str(MIXIN_DIR)))

    assert sorted(f.name for f in fields(RulesConfig)) == names
    assert set(CHANGED) == set(names)


@pytest.mark.parametrize("field", CHANGED)
def test_one_changed_field_changes_exactly_what_the_generator_changes(field: str,
                                                                     default_render: dict[str, Any]) -> None:
    value = CHANGED[field]
    jsonnet_value = list(value) if isinstance(value, tuple) else value
    config = replace(RulesConfig(), **{field: value})

    got = render({field: jsonnet_value})

    assert generated(config) == got
    before, after = expressions(default_render), expressions(got)
    changed = {path for path in after if before.get(path) != after[path]}
    assert changed, f"{field} is used nowhere"


def test_every_path_in_the_mixin_is_generated_or_the_readme() -> None:
    committed = {str(p.relative_to(MIXIN_DIR)) for p in MIXIN_DIR.rglob("*") if p.is_file()}

    assert {*mixin_files(), "README.md"} == committed


def test_the_config_table_in_the_docs_is_the_mixins_config() -> None:
    """docs/kubernetes.md lists every `_config` field once with its default, as jsonnet evaluates them."""
    docs = (MIXIN_DIR.parent / "docs" / "kubernetes.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \| `([^`]+)` \| .+ \|$", docs, flags=re.MULTILINE)
    table = "{" + ", ".join(f"{name}: {default}" for name, default in rows) + "}"
    defaults = "(import 'config.libsonnet')._config"

    assert len(rows) == len({name for name, _ in rows})
    assert json.loads(_jsonnet.evaluate_snippet("defaults", defaults, jpathdir=str(MIXIN_DIR))) == json.loads(
        _jsonnet.evaluate_snippet("table", table))


def test_the_kube_prometheus_stack_overlay_ships_the_mixins_objects(default_render: dict[str, Any]) -> None:
    """The overlay's PrometheusRule holds the mixin's groups and its ConfigMaps the mixin's dashboards."""
    objects = kustomize(OVERLAY)
    [rule] = [o for o in objects if o["kind"] == "PrometheusRule"]
    dashboards = {name: json.loads(text) for o in objects if o["kind"] == "ConfigMap"
                  for name, text in o.get("data", {}).items() if name.endswith(".json")}

    assert default_render["rules"]["groups"] + default_render["alerts"]["groups"] == rule["spec"]["groups"]
    assert default_render["dashboards"] == dashboards
    assert "kube-prometheus-stack" == rule["metadata"]["labels"]["release"]
