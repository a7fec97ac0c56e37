"""The dense peak table: SPEC §7 figures by NVML name, nothing for an unknown model."""

from __future__ import annotations

import pytest

from trainmon.nvml.peaks import peak_flops

T = 1e12


@pytest.mark.parametrize(("name", "bf16"), [
    ("NVIDIA H100 80GB HBM3", 989), ("NVIDIA H200", 989), ("NVIDIA H100 PCIe", 756), ("NVIDIA H100 NVL", 835),
    ("NVIDIA A100-SXM4-80GB", 312), ("NVIDIA A100 80GB PCIe", 312), ("NVIDIA L40S", 362), ("NVIDIA B200", 2250),
    ("NVIDIA GB200", 2500),
])
def test_known_models_have_their_dense_bf16_peak(name: str, bf16: float) -> None:
    peaks = peak_flops(name)

    assert (bf16 * T, bf16 * T, bf16 * T / 2) == (peaks["bf16"], peaks["fp16"], peaks["tf32"])


def test_fp8_is_double_on_hopper_and_later_and_absent_before() -> None:
    assert 2 * 989 * T == peak_flops("NVIDIA H100 80GB HBM3")["fp8"]
    assert "fp8" not in peak_flops("NVIDIA A100-SXM4-40GB")


@pytest.mark.parametrize("name", ["NVIDIA H800", "NVIDIA H200 NVL", "Tesla T4", "NVIDIA H100", ""])
def test_unknown_models_have_no_peak(name: str) -> None:
    assert {} == peak_flops(name)
