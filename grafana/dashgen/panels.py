"""Panel and dashboard helpers: a unit, a description and `${datasource}` on every panel; ids in order, around
the fixed ids of the panels alerts link to (bundle/links.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from bundle.links import LINKED, Dashboard, LinkedPanel
from grafana_foundation_sdk.builders import common, dashboard, heatmap, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import StackingMode
from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel
from grafana_foundation_sdk.models.dashboard import (
    DashboardLinkType,
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)

from .config import DashboardConfig

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Variable:
    """A query variable over label values (multi-select, "All" = `.+`, refreshed on time range change)."""

    name: str
    label: str
    query: str
    multi: bool = True


def _targets(queries: tuple[Query, ...]) -> list[prometheus.Dataquery]:
    return [
        prometheus.Dataquery().ref_id(chr(ord("A") + i)).expr(q.expr).legend_format(q.legend).datasource(DATASOURCE)
        for i, q in enumerate(queries)
    ]


_Builder = TypeVar("_Builder", timeseries.Panel, stat.Panel, heatmap.Panel)
Panel = timeseries.Panel | stat.Panel | heatmap.Panel


def _framed(panel: _Builder, title: str, description: str, unit: str, queries: tuple[Query, ...], width: int,
            height: int) -> _Builder:
    """What every panel carries: title, description, unit, the datasource variable, size and queries."""
    return (
        panel.title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(height)
        .targets(_targets(queries))  # type: ignore[arg-type]
    )


def graph(title: str, description: str, unit: str, *queries: Query, width: int = 12, height: int = 8,
          max_value: float | None = None, stacked: bool = False) -> timeseries.Panel:  # fmt: skip
    """A time series panel; `stacked` stacks the series (parts of a whole)."""
    panel = _framed(timeseries.Panel(), title, description, unit, queries, width, height).fill_opacity(10)
    if stacked:
        panel = panel.stacking(common.StackingConfig().mode(StackingMode.NORMAL)).fill_opacity(60)  # type: ignore[arg-type]
    if max_value is not None:
        panel = panel.min(0).max(max_value)
    return panel


def rows_heatmap(title: str, description: str, unit: str, query: Query, *, width: int = 24,
                 height: int = 8) -> heatmap.Panel:
    """A heatmap with one row per series (e.g. per rank) over time, values as they are (no bucketing)."""
    return _framed(heatmap.Panel(), title, description, unit, (query,), width, height).calculate(False)


def single(title: str, description: str, unit: str, query: Query, *, width: int = 4, height: int = 4) -> stat.Panel:
    """A stat panel showing one current value."""
    return _framed(stat.Panel(), title, description, unit, (query,), width, height)


@dataclass(frozen=True, slots=True)
class Linked:
    """A panel alerts link to, which keeps its fixed id."""

    ref: LinkedPanel
    panel: Panel


def linked(ref: LinkedPanel, panel: Panel) -> Linked:
    return Linked(ref, panel)


@dataclass(slots=True)
class Board:
    """A dashboard under construction: rows and panels in reading order, panel ids numbered from 1."""

    config: DashboardConfig
    identity: Dashboard  # its name and uid (bundle/links.py)
    title: str
    description: str
    variables: tuple[Variable, ...]
    _builder: dashboard.Dashboard = field(init=False)
    _next_id: int = field(init=False, default=1)
    _placed: set[LinkedPanel] = field(init=False, default_factory=set)
    _linked: frozenset[LinkedPanel] = field(init=False)  # this dashboard's linked panels
    _fixed: frozenset[int] = field(init=False)  # their ids, which the other panels skip

    def __post_init__(self) -> None:
        self._linked = frozenset(ref for ref in LINKED if ref.dashboard == self.identity)
        self._fixed = frozenset(ref.id for ref in self._linked)
        c = self.config
        self._builder = (
            dashboard.Dashboard(c.title_prefix + self.title)
            .uid(self.identity.uid)
            .description(self.description)
            .tags([c.tag])
            .refresh(c.refresh)
            .time(c.time_from, "now")
            .timezone("browser")
            .link(
                dashboard.DashboardLink("Trainmon")
                .type(DashboardLinkType.DASHBOARDS)  # type: ignore[arg-type]
                .tags([c.tag])
                .as_dropdown(True)
                .include_vars(True)
                .keep_time(True)
            )
            .with_variable(dashboard.DatasourceVariable("datasource").label("Data Source").type("prometheus"))
        )
        for v in self.variables:
            self._builder = self._builder.with_variable(
                dashboard.QueryVariable(v.name)
                .label(v.label)
                .datasource(DATASOURCE)
                .query(v.query)
                .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
                .sort(VariableSort.NATURAL_ASC)
                .multi(v.multi)
                .include_all(v.multi)
                .all_value(".+")
            )

    def row(self, title: str, *panels: Panel | Linked) -> Board:
        self._builder = self._builder.with_row(dashboard.Row(title).id(self._take_id()))
        for panel in panels:
            if isinstance(panel, Linked):
                self._builder = self._builder.with_panel(panel.panel.id(self._place(panel.ref)))
            else:
                self._builder = self._builder.with_panel(panel.id(self._take_id()))
        return self

    def _take_id(self) -> int:
        """The next id in order that no linked panel of this dashboard holds."""
        while self._next_id in self._fixed:
            self._next_id += 1
        self._next_id += 1
        return self._next_id - 1

    def _place(self, ref: LinkedPanel) -> int:
        if ref not in self._linked or ref in self._placed:
            raise ValueError(f"{ref} placed twice or on {self.identity.name}: a linked panel is on its dashboard once")
        self._placed.add(ref)
        return ref.id

    def build(self) -> DashboardModel:
        """The dashboard; every panel linked to it must have been placed.

        Raises:
            ValueError: a linked panel of this dashboard is missing (an alert would link to nothing).
        """
        missing = [ref for ref in LINKED if ref in self._linked and ref not in self._placed]
        if missing:
            raise ValueError(f"{self.identity.name}: linked panels not placed: {missing}")
        return self._builder.build()


def to_json(model: DashboardModel) -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(model) + "\n"
