"""bundle/links.py: each linked panel holds its fixed id on its dashboard, and an alert's link opens it."""

from __future__ import annotations

import json

import pytest
from bundle.links import DASHBOARDS as BOARDS
from bundle.links import LINKED, Dashboard, LinkedPanel
from grafana.dashgen.build import DASHBOARDS
from grafana.dashgen.config import DashboardConfig
from grafana.dashgen.panels import Board, Panel, Query, graph, linked, to_json
from prometheus.rulegen.config import RulesConfig
from prometheus.rulegen.dashboards import panel_url

from bundle import links


def panel_ids(dashboard: Dashboard) -> list[int]:
    board = json.loads((DASHBOARDS / f"{dashboard.uid}.json").read_text())
    assert dashboard.uid == board["uid"]
    return [panel["id"] for panel in board["panels"]]


def test_every_linked_panel_is_a_panel_of_its_dashboard_and_ids_are_unique() -> None:
    assert len(LINKED) == len(set(LINKED))
    assert set(LINKED) == {value for value in vars(links).values() if isinstance(value, LinkedPanel)}
    for dashboard in BOARDS:
        ids = panel_ids(dashboard)
        assert len(ids) == len(set(ids)), dashboard
        assert {ref.id for ref in LINKED if ref.dashboard == dashboard} <= set(ids)


def test_a_link_is_the_grafana_url_uid_and_id_of_the_panel() -> None:
    url = panel_url(RulesConfig(grafana_url="https://grafana.example"), links.XID_ERRORS)

    assert (f"https://grafana.example/d/trainmon-node?viewPanel={links.XID_ERRORS.id}"
            "&var-instance={{ $labels.instance }}") == url
    assert "https://grafana.example/d/trainmon-fleet?viewPanel=4" == \
        panel_url(RulesConfig(grafana_url="https://grafana.example"), links.GPUS_LOST)


def board() -> Board:
    return Board(config=DashboardConfig(), identity=links.FLEET, title="t", description="d", variables=())


def panel(title: str) -> Panel:
    return graph(title, "d", "none", Query("up", "x"))


def test_a_panel_inserted_before_a_linked_one_takes_another_id_and_the_link_still_holds() -> None:
    b = board()
    b.row("first", panel("new"), linked(links.NODES, panel("Nodes")), linked(links.GPUS_LOST, panel("Lost")))
    b.row("second", *(panel(f"p{i}") for i in range(24)), linked(links.FAILING_COLLECTORS, panel("Failing")))
    ids = {p["title"]: p["id"] for p in json.loads(to_json(b.build()))["panels"]}

    assert (2, 4, 26) == (ids["Nodes"], ids["Lost"], ids["Failing"])
    assert len(ids) == len(set(ids.values())) == 2 + 3 + 25


def test_a_dashboard_missing_a_linked_panel_or_placing_one_twice_fails() -> None:
    with pytest.raises(ValueError, match="not placed"):
        board().build()
    nodes = panel("Nodes")
    with pytest.raises(ValueError, match="placed twice"):
        board().row("r", linked(links.NODES, nodes), linked(links.NODES, nodes))
    with pytest.raises(ValueError, match="on fleet"):
        board().row("r", linked(links.XID_ERRORS, nodes))
