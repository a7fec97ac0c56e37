"""The `trainmon top` screen: a `View` as rich tables (colour only where rich finds a colour terminal)."""

from __future__ import annotations

import time

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from trainmon.top.view import EXITED, GpuRow, RankRow, View

GIB = 1 << 30


def screen(view: View | None, url: str, problem: str = "") -> RenderableType:
    """The whole screen; `problem` (the daemon cannot be read) replaces the tables but keeps the header."""
    header = Text(f"trainmon top  {url}", style="bold")
    if view is not None:
        header.append(f"  trainmon {view.version}")
        if view.simulated:
            header.append("  SIMULATED (trainmon demo)", style="bold yellow")
        if view.collected_at is not None:
            header.append(f"  collected {time.strftime('%H:%M:%S', time.localtime(view.collected_at))}")
    if problem or view is None:
        return Group(header, Text(problem or "waiting for the daemon", style="bold red"))
    return Group(header, _gpu_table(view.gpus), _rank_table(view.ranks), _failing(view.failing))


def _gpu_table(gpus: tuple[GpuRow, ...]) -> Table:
    table = _table("GPUs")
    for column in ("GPU", "name", "util", "SM", "memory", "power", "health", "owner"):
        table.add_column(column, justify="right" if column in {"GPU", "util", "SM", "memory", "power"} else "left",
                         no_wrap=True)
    for g in gpus:
        if not g.up:
            table.add_row(g.index, g.name.removeprefix("NVIDIA "), "-", "-", "-", "-", Text(g.health, style="red"),
                          g.owner, style="red")
            continue
        health = Text(g.health, style="" if g.health in {"-", "none"} else "bold red")
        table.add_row(g.index, g.name.removeprefix("NVIDIA "), _percent(g.utilization), _percent(g.sm_activity),
                      _pair(g.memory_used, g.memory_total, GIB, "GiB"), _pair(g.power, g.power_limit, 1, "W"),
                      health, g.owner)
    if not gpus:
        table.add_row("-", "no GPU", "", "", "", "", "", "")
    return table


def _rank_table(ranks: tuple[RankRow, ...]) -> Table:
    table = _table("Training ranks")
    for column in ("job", "rank", "GPU", "step", "steps/s", "comm", "data", "loss", "phase"):
        table.add_column(column, justify="left" if column in {"job", "phase"} else "right", no_wrap=True)
    for r in ranks:
        table.add_row(r.job_id, r.rank, r.gpu, _seconds(r.step_seconds), _number(r.steps_per_second, 2),
                      _percent(r.comm_share), _percent(r.data_share), _number(r.loss, 4), r.phase,
                      style="dim" if r.phase == EXITED else "")
    if not ranks:
        table.add_row("no training process reports to this daemon", "", "", "", "", "", "", "", "")
    return table


def _table(title: str) -> Table:
    return Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)


def _failing(failing: tuple[str, ...]) -> RenderableType:
    if not failing:
        return Text("Failing: nothing", style="green")
    return Group(Text("Failing:", style="bold red"), *(Text(f"  {line}", style="red") for line in failing))


def _percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.0%}"


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _pair(used: float | None, total: float | None, unit: float, name: str) -> str:
    if used is None:
        return "-"
    return f"{used / unit:.0f}/{total / unit:.0f} {name}" if total else f"{used / unit:.0f} {name}"
