"""All dashboards, by file name."""

from __future__ import annotations

from pathlib import Path

from . import fleet, job, node
from .config import DashboardConfig
from .panels import to_json

DASHBOARDS = Path(__file__).resolve().parents[1] / "dashboards"
BUILDERS = {
    "trainmon-node.json": node.build,
    "trainmon-training-job.json": job.build,
    "trainmon-fleet.json": fleet.build,
}


def dashboard_files(config: DashboardConfig | None = None) -> dict[str, str]:
    """File name under grafana/dashboards/ -> JSON text."""
    config = config or DashboardConfig()
    return {name: to_json(build(config)) for name, build in BUILDERS.items()}
