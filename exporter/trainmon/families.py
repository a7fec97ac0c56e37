"""Metric family constructors: each builds the client_python family of a catalogue `Family`."""

from __future__ import annotations

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    SummaryMetricFamily,
)

from trainmon.catalog import Family, Kind

__all__ = ["Metric", "ValueFamily", "counter", "gauge", "histogram", "info", "summary", "value_family"]

# What `gauge` and `counter` make: one value per label set, added with `add_metric(labels, value)`.
ValueFamily = GaugeMetricFamily | CounterMetricFamily


def gauge(family: Family) -> GaugeMetricFamily:
    return GaugeMetricFamily(family.name, family.help, labels=_labels(family, Kind.GAUGE))


def counter(family: Family) -> CounterMetricFamily:
    """A counter; prometheus_client strips the name's `_total` and re-adds it on output."""
    return CounterMetricFamily(family.name, family.help, labels=_labels(family, Kind.COUNTER))


def value_family(family: Family) -> ValueFamily:
    """A gauge or a counter, as the family is declared: for tables that hold both."""
    return counter(family) if family.kind is Kind.COUNTER else gauge(family)


def histogram(family: Family) -> HistogramMetricFamily:
    return HistogramMetricFamily(family.name, family.help, labels=_labels(family, Kind.HISTOGRAM))


def summary(family: Family) -> SummaryMetricFamily:
    return SummaryMetricFamily(family.name, family.help, labels=_labels(family, Kind.SUMMARY))


def info(family: Family) -> InfoMetricFamily:
    """An info metric; prometheus_client appends `_info` to the name, so it gets the name without."""
    labels = _labels(family, Kind.INFO)
    return InfoMetricFamily(family.name.removesuffix("_info"), family.help, labels=labels)


def _labels(family: Family, kind: Kind) -> list[str]:
    """The family's labels, once its kind is the one the constructor makes."""
    if family.kind is not kind:
        raise ValueError(f"{family.name} is declared {family.kind.value}, not {kind.value}")
    return list(family.labels)
