"""Checking what a collector serves against what the catalogue declares for it."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from trainmon.catalog import BY_SOURCE, Family, Kind
from trainmon.profiles import exposed_name

# Labels client_python adds to a histogram's buckets and a summary's quantiles: not the family's own.
SERIES_LABELS = frozenset({"le", "quantile"})


def assert_declared(families: Iterable[Metric], source: str) -> set[str]:
    """Every family in `families` is one that `catalog.BY_SOURCE[source]` declares, none served twice.

    A family's name, type and help are the declared ones; each sample is one of its series, with the
    declared labels in their order (an info's: some of them). Returns the names of the families that
    carried a sample, for a test to say which a fixture should make.
    """
    declared = {family.name: family for family in BY_SOURCE[source]}
    seen: set[str] = set()
    sampled: set[str] = set()
    for metric in families:
        name = exposed_name(metric)
        assert name not in seen, f"{name} served twice"
        seen.add(name)
        family = declared.get(name)
        assert family is not None, f"{name} is not declared in trainmon.catalog for {source}"
        assert (metric.type, metric.documentation) == (family.kind.value, family.help), f"{name}: type or help"
        for sample in metric.samples:
            _assert_sample(family, sample.name, tuple(label for label in sample.labels if label not in SERIES_LABELS))
            sampled.add(name)
    return sampled


def _assert_sample(family: Family, series: str, labels: tuple[str, ...]) -> None:
    assert series in family.series, f"{series} is not a series of {family.name}"
    if family.kind is Kind.INFO:
        assert set(labels) <= set(family.labels), f"{series}: labels {labels} beyond {family.labels}"
    else:
        assert labels == family.labels, f"{series}: labels {labels}, declared {family.labels}"
