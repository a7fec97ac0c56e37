"""Each alert's `dashboard_url`: the dashboard panel that explains it, by its fixed id (bundle/links.py)."""

from __future__ import annotations

from bundle.links import LinkedPanel

from .config import RulesConfig


def panel_url(c: RulesConfig, panel: LinkedPanel) -> str:
    """`<grafana>/d/<uid>?viewPanel=<id>`, with the node's or the training job's variable set from the alert's
    label (`&var-instance={{ $labels.instance }}`)."""
    variable = panel.dashboard.link_variable
    selection = f"&var-{variable}={{{{ $labels.{variable} }}}}" if variable else ""
    return f"{c.grafana_url}/d/{panel.dashboard.uid}?viewPanel={panel.id}{selection}"
