"""What users change about the dashboards, each with when to change it."""

from __future__ import annotations

from dataclasses import dataclass


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
    # SM activity under this counts a GPU as idle on the fleet dashboard (the idle alert uses the same).
    idle_sm_ratio: float = 0.05

    def uid(self, name: str) -> str:
        """Stable uid from the dashboard's name: re-imports replace instead of duplicating."""
        return f"trainmon-{name}"
