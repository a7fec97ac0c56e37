"""The Node dashboard's GPU-owner panels evaluated by promtool: a GPU with several owners is one line each."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.grafana.dashboards import DASHBOARD_DIR, data_panels, load
from tests.helpers.tools import require_tool

N1 = 'job="trainmon",instance="n1:9842"'


def panel_expr(title: str) -> str:
    """The panel's query as Prometheus receives it with the Node dashboard's variables set to All."""
    [panel] = [p for p in data_panels(load(DASHBOARD_DIR / "trainmon-node.json")) if p["title"] == title]
    return str(panel["targets"][0]["expr"]).replace("$job", ".+").replace("$instance", ".+")


def test_a_gpu_shared_by_containers_and_sources_shows_each_owner(tmp_path: Path) -> None:
    """GPU 0: two containers share its DRA claim and a third pod holds it through the device plugin (before,
    the join's right side had three series for one GPU and the query failed); GPU 1 is down."""
    promtool = require_tool("promtool")
    owners = [("0", "GPU-a", "p0", "main", "dra", "shared"), ("0", "GPU-a", "p0", "side", "dra", "shared"),
              ("0", "GPU-a", "p1", "main", "device_plugin", ""), ("1", "GPU-b", "p2", "main", "device_plugin", "")]
    series = [{"series": f'trainmon_gpu_up{{{N1},gpu="0",uuid="GPU-a"}}', "values": "1x5"},
              {"series": f'trainmon_gpu_up{{{N1},gpu="1",uuid="GPU-b"}}', "values": "0x5"}]
    series += [{"series": f'trainmon_gpu_allocation_info{{{N1},gpu="{gpu}",uuid="{uuid}",namespace="ml",pod="{pod}",'
                          f'container="{container}",source="{source}",claim="{claim}"}}', "values": "1x5"}
               for gpu, uuid, pod, container, source, claim in owners]
    expected = [{"labels": f'{{instance="n1:9842",gpu="{gpu}",uuid="{uuid}",namespace="ml",pod="{pod}",'
                           f'container="{container}"}}', "value": 1 if gpu == "0" else 0}
                for gpu, uuid, pod, container, _, _ in owners]
    test_file = tmp_path / "owners.test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [{"expr": panel_expr("Kubernetes owner of each GPU"), "eval_time": "2m",
                              "exp_samples": expected}]}]}))

    result = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60)

    assert 0 == result.returncode, result.stdout + result.stderr
