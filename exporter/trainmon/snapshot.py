"""What a scrape serves: an immutable snapshot of one collection cycle, and where the latest lives."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from trainmon.families import Metric

# `ok`; `no_data`: its hardware is absent, not a failure; `failing`: it raised or is still running.
CollectorState = Literal["ok", "no_data", "failing"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectorStatus:
    """How one collector did in one cycle."""

    name: str
    state: CollectorState
    duration_s: float
    error: str | None = None
    last_success: float | None = None
    found: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    details: Mapping[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.state != "failing"


class RenderCache:
    """Rendered bytes of one snapshot, per (content type, encoding); each rendered at most once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bodies: dict[tuple[str, str], bytes] = {}

    def peek(self, key: tuple[str, str]) -> bytes | None:
        """The bytes if they are rendered already, else None (never renders)."""
        return self._bodies.get(key)

    def get(self, key: tuple[str, str], render: Callable[[], bytes]) -> bytes:
        with self._lock:
            body = self._bodies.get(key)
            if body is None:
                body = self._bodies[key] = render()
            return body


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Everything one cycle produced. `collect()` makes it a prometheus_client collector."""

    families: tuple[Metric, ...]
    statuses: tuple[CollectorStatus, ...]
    taken_at: float
    rendered: RenderCache = field(default_factory=RenderCache, compare=False, repr=False)

    def collect(self) -> Iterator[Metric]:
        yield from self.families

    def status(self, name: str) -> CollectorStatus | None:
        return next((s for s in self.statuses if s.name == name), None)


class SnapshotStore:
    """Holds the latest snapshot; publishing replaces one reference, so readers never see a mix."""

    def __init__(self, shape: Callable[[Metric], Metric | None] | None = None) -> None:
        self._latest: Snapshot | None = None
        self._published = threading.Event()
        self._shape = shape  # the --profile: what it serves of a family, None for nothing; None serves all

    def publish(self, snapshot: Snapshot) -> None:
        if self._shape is not None:
            served = (self._shape(family) for family in snapshot.families)
            snapshot = replace(snapshot, families=tuple(family for family in served if family is not None))
        self._latest = snapshot
        self._published.set()

    def latest(self) -> Snapshot | None:
        return self._latest

    def wait(self, timeout: float | None = None) -> Snapshot | None:
        self._published.wait(timeout)
        return self._latest
