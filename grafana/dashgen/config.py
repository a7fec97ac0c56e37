"""What users change about the dashboards, each with when to change it."""

from __future__ import annotations

from dataclasses import dataclass

from bundle.config import IDLE_SM_RATIO, SELECTOR


@dataclass(frozen=True, slots=True, kw_only=True)
class DashboardConfig:
    # Tag shared by the dashboards; the dashboard links menu lists every dashboard with it.
    tag: str = "trainmon"
    # Prefix of every title, so the dashboards sort together in Grafana's list.
    title_prefix: str = "Trainmon / "
    # Auto-refresh; lower it on small fleets, raise it on large ones.
    refresh: str = "30s"
    # Default time range.
    time_from: str = "now-3h"
    # The trainmon targets (the rules' --selector): the Job variable lists the jobs they are in.
    selector: str = SELECTOR
    # SM activity under this counts a GPU as idle on the fleet dashboard (the idle alert uses the same).
    idle_sm_ratio: float = IDLE_SM_RATIO

    def matchers(self, dashboard_matchers: str) -> str:
        """The label matchers of a query: the selector, then the dashboard's variables."""
        return f"{self.selector}, {dashboard_matchers}"
