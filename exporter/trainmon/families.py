"""The one module that knows the `trainmon_` prefix: metric family constructors."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

NAMESPACE = "trainmon"

__all__ = ["NAMESPACE", "Metric", "ValueFamily", "counter", "gauge", "histogram", "info"]

# What `gauge` and `counter` make: one value per label set, added with `add_metric(labels, value)`.
ValueFamily = GaugeMetricFamily | CounterMetricFamily


def gauge(name: str, documentation: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{NAMESPACE}_{name}", documentation, labels=list(labels))


def counter(name: str, documentation: str, labels: Sequence[str] = ()) -> CounterMetricFamily:
    """A counter; `name` ends in `_total`, which prometheus_client strips and re-adds on output."""
    return CounterMetricFamily(f"{NAMESPACE}_{name}", documentation, labels=list(labels))


def histogram(name: str, documentation: str, labels: Sequence[str] = ()) -> HistogramMetricFamily:
    return HistogramMetricFamily(f"{NAMESPACE}_{name}", documentation, labels=list(labels))


def info(name: str, documentation: str, labels: Sequence[str] = ()) -> InfoMetricFamily:
    """An info metric; `name` without `_info`, which prometheus_client appends."""
    return InfoMetricFamily(f"{NAMESPACE}_{name}", documentation, labels=list(labels))
