"""Dense peak FLOP/s of the GPU models trainmon knows, keyed by the name NVML reports (SPEC §7).

Dense figures only, never the 2:4-sparsity ones that datasheets headline (exactly twice these).
bf16 and fp16 are the same; tf32 is half of them; fp8 is double, on Hopper and later only. A
model not listed here has no peak: MFU is then absent rather than guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

TERA = 1e12


@dataclass(frozen=True, slots=True)
class Model:
    pattern: re.Pattern[str]
    bf16_tflops: float
    fp8: bool  # Hopper and later


def _model(pattern: str, bf16_tflops: float, *, fp8: bool) -> Model:
    return Model(re.compile(pattern, re.IGNORECASE), bf16_tflops, fp8)


# Full-match patterns over the NVML name; the first that matches wins.
MODELS = (
    _model(r"NVIDIA H100 NVL", 835, fp8=True),
    _model(r"NVIDIA H100 PCIe", 756, fp8=True),
    _model(r"NVIDIA H100 (80GB HBM3|SXM5 \d+GB)", 989, fp8=True),
    _model(r"NVIDIA H200( \d+GB HBM3e)?", 989, fp8=True),  # the SXM part; H200 NVL is another figure
    _model(r"NVIDIA A100[- ].*", 312, fp8=False),
    _model(r"NVIDIA L40S", 362, fp8=False),
    _model(r"NVIDIA B200", 2250, fp8=True),
    _model(r"NVIDIA GB200.*", 2500, fp8=True),
)


def peak_flops(nvml_name: str) -> Mapping[str, float]:
    """FLOP/s by dtype (`bf16`, `fp16`, `tf32`, and `fp8` where the model has it); empty when unknown."""
    name = nvml_name.strip()
    for model in MODELS:
        if model.pattern.fullmatch(name):
            bf16 = model.bf16_tflops * TERA
            peaks = {"bf16": bf16, "fp16": bf16, "tf32": bf16 / 2}
            if model.fp8:
                peaks["fp8"] = bf16 * 2
            return peaks
    return {}
