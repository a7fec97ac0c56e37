"""Each alert's `dashboard_url`: the generated dashboard panel that explains it, found by its title.

The uid and panel id come from the dashboard generator itself (grafana/generator), so a panel that
moves or is renamed changes every link to it, or fails the generation, never leaves a stale number.
"""

from __future__ import annotations

import json
from functools import cache

from grafana.generator.build import dashboard_files
from grafana.generator.config import DashboardConfig

from .config import RulesConfig

# The dashboards by their name in DashboardConfig.uid().
NODE = "node"
TRAINING_JOB = "training-job"
FLEET = "fleet"


@cache
def _panel_ids() -> dict[str, dict[str, list[int]]]:
    """Dashboard uid -> panel title -> ids (rows excluded), from the generated dashboards."""
    ids: dict[str, dict[str, list[int]]] = {}
    for text in dashboard_files().values():
        board = json.loads(text)
        titles = ids.setdefault(board["uid"], {})
        for panel in board["panels"]:
            if panel["type"] != "row":
                titles.setdefault(panel["title"], []).append(panel["id"])
    return ids


def panel_url(c: RulesConfig, dashboard: str, title: str) -> str:
    """`<grafana>/d/<uid>?viewPanel=<id>` of the one panel called `title` on `dashboard`.

    Raises:
        KeyError: no such panel, or more than one panel of that title (say which one, by a unique title).
    """
    uid = DashboardConfig().uid(dashboard)
    ids = _panel_ids().get(uid, {}).get(title, [])
    if len(ids) != 1:
        raise KeyError(f"dashboard {uid} has {len(ids)} panels titled {title!r}; an alert links to exactly one")
    return f"{c.grafana_url}/d/{uid}?viewPanel={ids[0]}"
