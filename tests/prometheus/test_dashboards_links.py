"""prometheus/rulegen/dashboards.py: alert links resolve to the panel of that title, or fail the generation."""

from __future__ import annotations

import json

import pytest
from grafana.dashgen.build import DASHBOARDS
from prometheus.rulegen.config import RulesConfig
from prometheus.rulegen.dashboards import NODE, TRAINING_JOB, panel_url


def test_a_link_is_the_grafana_url_uid_and_id_of_the_panel_titled_so() -> None:
    node = json.loads((DASHBOARDS / "trainmon-node.json").read_text())
    xid = next(panel["id"] for panel in node["panels"] if panel["title"] == "XID errors")

    url = panel_url(RulesConfig(grafana_url="https://grafana.example"), NODE, "XID errors")

    assert f"https://grafana.example/d/trainmon-node?viewPanel={xid}&var-instance={{{{ $labels.instance }}}}" == url


@pytest.mark.parametrize(("dashboard", "title", "count"), [
    (NODE, "No such panel", 0),
    (NODE, "Power", 2),  # a stat and a graph share the title: say which by a unique title
    (TRAINING_JOB, "Throughput", 0),  # a row, not a panel
])
def test_a_title_that_is_not_one_panel_fails(dashboard: str, title: str, count: int) -> None:
    with pytest.raises(KeyError, match=f"has {count} panels titled {title!r}"):
        panel_url(RulesConfig(), dashboard, title)
