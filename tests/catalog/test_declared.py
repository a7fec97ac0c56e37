"""`assert_declared`, the check each collector's tests run on what it serves."""

from __future__ import annotations

import pytest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric, SummaryMetricFamily

from tests.helpers.catalog import assert_declared
from trainmon.catalog import daemon, nccl_inspector, training
from trainmon.families import counter, gauge, histogram, info, summary


def served() -> list[Metric]:
    """A gauge and an info, as the scheduler builds them, with a sample each."""
    success, build = gauge(daemon.COLLECTOR_SUCCESS), info(daemon.BUILD_INFO)
    success.add_metric(["gpu"], 1)
    build.add_metric(["1.0"], {})
    return [success, build]


def test_declared_families_of_every_kind_pass_and_the_sampled_ones_are_named() -> None:
    steps = histogram(training.TRAIN_STEP_DURATION_SECONDS)
    operations = counter(nccl_inspector.NCCL_INSPECTOR_BYTES_TOTAL)
    bandwidth = summary(nccl_inspector.NCCL_INSPECTOR_BUS_BANDWIDTH_BYTES_PER_SECOND)
    steps.add_metric(["job", "0"], [("1.0", 1), ("+Inf", 2)], 3.0)
    operations.add_metric(["job", "0", "comm", "allreduce", "1MB"], 5)
    bandwidth.add_metric(["job", "0", "comm", "allreduce", "1MB"], count_value=1, sum_value=2.0)

    assert {"trainmon_build_info", "trainmon_collector_success"} == assert_declared(served(), "daemon")
    assert {training.TRAIN_STEP_DURATION_SECONDS.name} == assert_declared([steps], "training")
    assert {operations.name + "_total", bandwidth.name} == assert_declared([operations, bandwidth], "nccl_inspector")
    assert set() == assert_declared([gauge(daemon.COLLECTOR_DURATION_SECONDS)], "daemon")


def test_an_undeclared_name_fails() -> None:
    with pytest.raises(AssertionError, match="trainmon_collector_surprise is not declared"):
        assert_declared([*served(), GaugeMetricFamily("trainmon_collector_surprise", "Undeclared.")], "daemon")


def test_a_family_of_another_source_fails() -> None:
    with pytest.raises(AssertionError, match=r"trainmon_collector_success is not declared .* for gpu"):
        assert_declared(served(), "gpu")


@pytest.mark.parametrize("family", [
    GaugeMetricFamily("trainmon_collector_success", "Another help.", labels=["collector"]),
    SummaryMetricFamily("trainmon_collector_success", daemon.COLLECTOR_SUCCESS.help, labels=["collector"]),
], ids=["help", "type"])
def test_a_declared_name_with_another_help_or_type_fails(family: Metric) -> None:
    with pytest.raises(AssertionError, match="type or help"):
        assert_declared([family], "daemon")


@pytest.mark.parametrize("labels", [["job"], ["collector", "job"], []], ids=["other", "extra", "missing"])
def test_a_wrong_label_fails(labels: list[str]) -> None:
    family = GaugeMetricFamily("trainmon_collector_success", daemon.COLLECTOR_SUCCESS.help, labels=labels)
    family.add_metric(["x"] * len(labels), 1)
    with pytest.raises(AssertionError, match="labels"):
        assert_declared([family], "daemon")


def test_an_info_may_carry_some_of_its_labels_but_no_other() -> None:
    family = InfoMetricFamily("trainmon_build", daemon.BUILD_INFO.help, labels=[])
    family.add_metric([], {})
    assert_declared([family], "daemon")
    family.add_metric([], {"commit": "abc"})
    with pytest.raises(AssertionError, match="beyond"):
        assert_declared([family], "daemon")


def test_a_family_served_twice_fails() -> None:
    with pytest.raises(AssertionError, match="trainmon_collector_success served twice"):
        assert_declared([*served(), gauge(daemon.COLLECTOR_SUCCESS)], "daemon")


def test_a_constructor_refuses_a_family_of_another_kind() -> None:
    """What `assert_declared` checks of a type, the constructors already refuse to build."""
    with pytest.raises(ValueError, match="trainmon_build_info is declared info, not gauge"):
        gauge(daemon.BUILD_INFO)
    with pytest.raises(ValueError, match="is declared gauge, not counter"):
        counter(daemon.COLLECTOR_SUCCESS)
