"""Reading metric values the way Prometheus would: through a registry or the text format."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families


class _Families:
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self._families


def registry_of(families: Iterable[Metric]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))  # type: ignore[arg-type]
    return registry


SampleKey = tuple[str, frozenset[tuple[str, str]]]


def samples_of(families: Iterable[Metric]) -> dict[SampleKey, float]:
    """Every sample of `families`, keyed by name and label set."""
    return {(s.name, frozenset(s.labels.items())): s.value for family in families for s in family.samples}


def parse_samples(text: str) -> dict[SampleKey, float]:
    """Every sample of a Prometheus text exposition, keyed by name and label set."""
    return samples_of(text_string_to_metric_families(text))
