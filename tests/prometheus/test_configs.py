"""The example prometheus.yml files and alertmanager.yml: accepted by promtool and amtool, routes as documented."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers.tools import require_tool
from tests.prometheus.rulefiles import PROMETHEUS, RULE_FILES, load

ALERTMANAGER = PROMETHEUS / "alertmanager.yml"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True)


def test_static_prometheus_config_passes_promtool() -> None:
    """prometheus.yml, including the rule files it loads, is valid."""
    result = _run(require_tool("promtool"), "check", "config", str(PROMETHEUS / "prometheus.yml"))

    assert 0 == result.returncode, result.stdout + result.stderr


def test_kubernetes_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    """prometheus-kubernetes.yml discovers pods; everything else in it is valid.

    Debian's promtool is built without Kubernetes discovery, so the check runs on a copy whose
    kubernetes_sd_configs is replaced by a static target; relabelling, rules and alerting are checked as shipped.
    """
    promtool = require_tool("promtool")
    config = load(PROMETHEUS / "prometheus-kubernetes.yml")
    (job,) = config["scrape_configs"]
    assert [{"role": "pod"}] == job.pop("kubernetes_sd_configs")
    job["static_configs"] = [{"targets": ["node:9842"]}]
    for rule_file in RULE_FILES:
        shutil.copy(rule_file, tmp_path)
    copy = tmp_path / "prometheus.yml"
    copy.write_text(yaml.safe_dump(config))

    result = _run(promtool, "check", "config", str(copy))

    assert "trainmon" == job["job_name"]
    assert 0 == result.returncode, result.stdout + result.stderr


def test_alertmanager_config_passes_amtool() -> None:
    result = _run(require_tool("amtool"), "check-config", str(ALERTMANAGER))

    assert 0 == result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (("severity=critical", "alertname=TrainmonGPULost"), "pager"),
        (("severity=warning", "alertname=TrainmonStragglerRank"), "ticket"),
        (("severity=info",), "blackhole"),
    ],
)
def test_alertmanager_routes_by_severity(labels: tuple[str, ...], receiver: str) -> None:
    """critical pages, warning files a ticket, info is dropped."""
    amtool = require_tool("amtool")

    result = _run(amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER}", *labels)

    assert (0, receiver) == (result.returncode, result.stdout.strip())
