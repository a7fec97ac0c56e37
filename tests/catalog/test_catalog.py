"""The catalogue itself: each name once, each module's table complete, a source for every collector."""

from __future__ import annotations

import importlib

import pytest

from trainmon import catalog
from trainmon.catalog import BY_NAME, BY_SOURCE, FAMILIES, Family, Kind, undeclared
from trainmon.collectors import AVAILABLE

UNITS = ("bytes_per_second", "seconds", "bytes", "ratio", "watts", "joules", "celsius", "hertz", "flops")


def test_no_family_is_declared_twice() -> None:
    assert len(FAMILIES) == len(BY_NAME)
    series = [s for family in FAMILIES for s in family.series]
    assert len(series) == len(set(series))


def test_every_collector_has_its_families_and_nothing_else_does() -> None:
    assert set(BY_SOURCE) == {*AVAILABLE, "daemon", "rules"}


@pytest.mark.parametrize("source", sorted(BY_SOURCE))
def test_a_modules_table_holds_every_family_it_declares_in_order(source: str) -> None:
    module = importlib.import_module(f"trainmon.catalog.{'recorded' if source == 'rules' else source}")
    declared = [value for value in vars(module).values() if isinstance(value, Family)]
    assert declared == list(module.FAMILIES) == list(BY_SOURCE[source])
    assert all(getattr(module, name).name == f"trainmon_{name.lower()}" for name in vars(module)
               if isinstance(getattr(module, name), Family) and name != "DEMO_INFO")


@pytest.mark.parametrize("family", FAMILIES, ids=str)
def test_the_unit_is_the_one_the_name_ends_in(family: Family) -> None:
    base = family.name.removesuffix("_total").removesuffix("_info")
    assert family.unit == next((u for u in UNITS if base.endswith(f"_{u}")), "")
    assert family.help.endswith((".", ")")), family.help


def test_a_family_formats_as_its_name_and_names_its_series() -> None:
    histogram = catalog.training.TRAIN_STEP_DURATION_SECONDS
    assert f"rate({histogram.sum}[5m]) / {histogram}" == \
        "rate(trainmon_train_step_duration_seconds_sum[5m]) / trainmon_train_step_duration_seconds"
    assert histogram.series == tuple(f"{histogram}_{s}" for s in ("bucket", "sum", "count"))
    assert catalog.gpu.GPU_UP.series == ("trainmon_gpu_up",)
    with pytest.raises(AttributeError, match="gauge"):
        _ = catalog.gpu.GPU_UP.bucket


@pytest.mark.parametrize(("name", "kind", "labels", "error"), [
    ("gpu_up", Kind.GAUGE, (), "starts with trainmon_"),
    ("trainmon_x", Kind.COUNTER, (), "ends in _total"),
    ("trainmon_x", Kind.INFO, (), "ends in _info"),
    ("trainmon_x", Kind.GAUGE, ("gpu", "gpu"), "a label twice"),
])
def test_a_malformed_declaration_fails_at_import(name: str, kind: Kind, labels: tuple[str, ...], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Family(name, kind, "Help.", labels)


def test_undeclared_names_are_found_and_rule_names_and_prefixes_are_not() -> None:
    text = ('rate(trainmon_nvme_read_bytes_total[5m]) + trainmon_nvme_reed_bytes_total '
            '+ job_id:trainmon_train_steps:avg_rate5m + trainmon_gpu_* + trainmon_nope_ '
            '+ trainmon_train_step_duration_seconds_bucket')
    assert undeclared([text]) == ["trainmon_nope_", "trainmon_nvme_reed_bytes_total"]
