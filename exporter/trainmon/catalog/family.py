"""What a metric family is, declared once: its name, kind, help text, labels and unit.

A `Family` formats as its name, so a rule or a panel spells `f"rate({NVME_READ_BYTES_TOTAL}[5m])"`
and a rename moves every reader with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

PREFIX = "trainmon_"


class Kind(str, Enum):
    """The exposition type of a family (client_python's names)."""

    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    SUMMARY = "summary"
    INFO = "info"


# What the exposition appends to a family's name, by kind: a counter's and an info's `name` carry theirs.
SERIES_SUFFIXES: dict[Kind, tuple[str, ...]] = {
    Kind.GAUGE: ("",),
    Kind.COUNTER: ("",),
    Kind.INFO: ("",),
    Kind.HISTOGRAM: ("_bucket", "_sum", "_count"),
    Kind.SUMMARY: ("", "_sum", "_count"),
}


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family as served on /metrics.

    Attributes:
        name: the series name with the `trainmon_` prefix; a counter's ends in `_total` and an info's in
            `_info`, as Prometheus stores them. A histogram's or a summary's is the base of its series.
        kind: the exposition type.
        help: the HELP text.
        labels: every label a series of the family may carry, in the order the collector fills them.
        unit: the base unit the name ends in (`seconds`, `bytes`, `ratio`…), or "" for a count or a state.
    """

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""

    def __post_init__(self) -> None:
        if not self.name.startswith(PREFIX):
            raise ValueError(f"{self.name}: a family name starts with {PREFIX}")
        if self.kind is Kind.COUNTER and not self.name.endswith("_total"):
            raise ValueError(f"{self.name}: a counter's name ends in _total")
        if self.kind is Kind.INFO and not self.name.endswith("_info"):
            raise ValueError(f"{self.name}: an info family's name ends in _info")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"{self.name}: a label twice in {self.labels}")

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

    @property
    def series(self) -> tuple[str, ...]:
        """Every series name the family is stored under in Prometheus."""
        return tuple(self.name + suffix for suffix in SERIES_SUFFIXES[self.kind])

    @property
    def bucket(self) -> str:
        return self._part("_bucket", Kind.HISTOGRAM)

    @property
    def sum(self) -> str:
        return self._part("_sum", Kind.HISTOGRAM, Kind.SUMMARY)

    @property
    def count(self) -> str:
        return self._part("_count", Kind.HISTOGRAM, Kind.SUMMARY)

    def _part(self, suffix: str, *kinds: Kind) -> str:
        if self.kind not in kinds:
            raise AttributeError(f"{self.name} is a {self.kind.value}: no {suffix} series")
        return self.name + suffix
