"""Rule records and their rule-file form."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["critical", "warning", "info"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    record: str
    expr: str
    labels: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, object]:
        rule: dict[str, object] = {"record": self.record, "expr": self.expr.strip()}
        if self.labels:
            rule["labels"] = dict(self.labels)
        return rule


@dataclass(frozen=True, slots=True, kw_only=True)
class Alert:
    """One alerting rule; several with the same name are one alert with alternative conditions."""

    alert: str
    expr: str
    severity: Severity
    summary: str
    description: str
    # The panel that explains the alert: `dashboards.panel_url(c, links.<PANEL>)`.
    dashboard_url: str
    for_: str = "0s"
    runbook_url: str = ""
    # Extra labels, e.g. `cause` to tell apart the rules of one alert (promtool's duplicate-rules lint).
    labels: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, object]:
        rule: dict[str, object] = {"alert": self.alert, "expr": self.expr.strip()}
        if self.for_ != "0s":
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity, **dict(self.labels)}
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": self.runbook_url,
            "dashboard_url": self.dashboard_url,
        }
        return rule


@dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    name: str
    rules: list[Record] | list[Alert] = field(default_factory=list)
    interval: str = "30s"

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "interval": self.interval, "rules": [r.as_dict() for r in self.rules]}
