"""Loaders for the committed dashboards: panels, targets and the variables they use."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = REPO / "grafana" / "dashboards"
DASHBOARD_FILES = sorted(DASHBOARD_DIR.glob("*.json"))
# Grafana's own variables.
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range", "__name"}
VARIABLE_USE = re.compile(r"\$\{?(\w+)")


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows included, with nested row panels."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def data_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in panels(board) if p["type"] != "row"]


def exprs(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in data_panels(board) for t in p["targets"]]


def substitute(expr: str, rate_interval: str = "1m", time_range: str = "1h") -> str:
    """A panel expression as Prometheus would receive it with every variable set to "All"."""
    expr = expr.replace("$__rate_interval", rate_interval).replace("$__range", time_range)
    return re.sub(r"\$\{?\w+\}?", ".+", expr)
