"""What a process group is called, which global ranks it holds, and its timeout, as every member computes them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainmon.wire import MAX_TEXT


def group_label(pg: Any) -> str:
    """A label every member of the group computes alike: the default group's description, else
    description and name (torch gives each new group the same name on all its members)."""
    desc, name = str(getattr(pg, "group_desc", "") or ""), str(getattr(pg, "group_name", "") or "")
    if desc == "default_pg" or not name:
        return desc or "unnamed"
    return f"{desc if desc and desc != 'undefined' else 'group'}:{name}"


def rank_ranges(ranks: Iterable[int]) -> str | None:
    """Global ranks in short form: `0-3,8-11` (runs), `0-56:8` (one stride); None past MAX_TEXT characters."""
    found = sorted(set(ranks))
    if len(found) > 2 and (step := found[1] - found[0]) > 1 and found == list(range(found[0], found[-1] + 1, step)):
        return f"{found[0]}-{found[-1]}:{step}"
    runs: list[list[int]] = []
    for rank in found:
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    text = ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return text if 0 < len(text) <= MAX_TEXT else None


def pg_timeout(pg: Any) -> float | None:
    """The group's timeout in seconds, the shortest of its backends' (each device type's), or None."""
    found = []
    for device in getattr(pg, "_device_types", ()):
        try:
            found.append(float(pg._get_backend(device).options._timeout.total_seconds()))
        except Exception:  # a backend without options (a custom one): its timeout is unknown
            continue
    return min(found, default=None)
