"""Each alert's `dashboard_url`: the generated dashboard panel that explains it, found by its title.

The uid and panel id come from the dashboard generator itself (grafana/dashgen), so a panel that
moves or is renamed changes every link to it, or fails the generation, never leaves a stale number.
"""

from __future__ import annotations

import json
from functools import cache

from grafana.dashgen.build import dashboard_files
from grafana.dashgen.config import DashboardConfig

from .config import RulesConfig

# The dashboards by their name in DashboardConfig.uid().
NODE = "node"
TRAINING_JOB = "training-job"
FLEET = "fleet"
# The dashboard variable a link sets from the alert's label of the same name, so the panel opens on the
# alert's node or training job (tests/prometheus/test_rules.py checks each alert has that label).
LINK_VARIABLE = {NODE: "instance", TRAINING_JOB: "job_id"}


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
    """`<grafana>/d/<uid>?viewPanel=<id>` of the one panel called `title` on `dashboard`, with the node's or
    the training job's variable set from the alert's label (`&var-instance={{ $labels.instance }}`).

    Raises:
        KeyError: no such panel, or more than one panel of that title (say which one, by a unique title).
    """
    uid = DashboardConfig().uid(dashboard)
    ids = _panel_ids().get(uid, {}).get(title, [])
    if len(ids) != 1:
        raise KeyError(f"dashboard {uid} has {len(ids)} panels titled {title!r}; an alert links to exactly one")
    variable = LINK_VARIABLE.get(dashboard)
    selection = f"&var-{variable}={{{{ $labels.{variable} }}}}" if variable else ""
    return f"{c.grafana_url}/d/{uid}?viewPanel={ids[0]}{selection}"
