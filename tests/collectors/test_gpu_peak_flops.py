"""`trainmon_gpu_peak_flops` through the C fake libnvidia-ml.so.1: an H100 has its peaks, an unknown GPU none."""

from __future__ import annotations

from pathlib import Path

from tests.collectors.test_gpu_fake_nvml import ids, scrape_until, start
from tests.fake_nvml import scenario as scenarios
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.helpers.daemon import Daemon


def test_peak_flops_by_dtype_for_a_known_model_only(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                    daemons: list[Daemon]) -> None:
    scenario = scenarios.changed(scenarios.node(2), 1, name="NVIDIA Tesla T4")
    daemon, _ = start(tmp_path, fake_nvml_dir, scenario)
    daemons.append(daemon)

    metrics = scrape_until(daemon, lambda m: ("trainmon_gpu_up", ids(scenario, 1)) in m)
    peaks = {dict(labels)["dtype"]: value for (name, labels), value in metrics.items()
             if name == "trainmon_gpu_peak_flops" and labels >= ids(scenario, 0)}

    assert {"bf16": 989e12, "fp16": 989e12, "tf32": 494.5e12, "fp8": 1978e12} == peaks
    assert not [labels for name, labels in metrics if name == "trainmon_gpu_peak_flops" and labels >= ids(scenario, 1)]
