"""Model FLOPs for MFU: the dense-transformer estimate, and the per-step count the hook reports.

Standard library only (the hook imports it inside other people's images).

MFU counts the FLOPs the model needs, not the ones the hardware ran: recomputed activations
(activation checkpointing) are not counted, so MFU does not reward recomputation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def transformer_flops_per_token(n_params: float, n_layers: int, hidden_size: int, seq_len: int) -> float:
    """Training FLOPs per token of a dense decoder-only transformer: `6·N + 12·L·H·T`.

    `6·N` is the forward (2·N) and backward (4·N) matrix multiplications against the N
    non-embedding parameters; `12·L·H·T` is the attention scores and their weighted sum
    (QKᵀ and AV), which grow with the sequence length T, over L layers of width H. This is the
    estimate of Chowdhery et al., "PaLM: Scaling Language Modeling with Pathways" (2022),
    appendix B (written there as 6N + 12·L·H·Q·T with H heads of size Q), and of Kaplan et al.
    (2020) §2.1; Megatron-LM and nanoGPT report MFU with it.

    Raises:
        ValueError: a negative or non-finite size.
    """
    sizes = (n_params, n_layers, hidden_size, seq_len)
    if not all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in sizes):
        raise ValueError(f"model sizes must be finite and non-negative, got {sizes}")
    return 6.0 * n_params + 12.0 * n_layers * hidden_size * seq_len


@dataclass(frozen=True, slots=True)
class FlopsRate:
    """How many model FLOPs one step costs: per token, per sample or per step (at most one given)."""

    per_token: float | None = None
    per_sample: float | None = None
    per_step: float | None = None

    def __post_init__(self) -> None:
        given = [v for v in (self.per_token, self.per_sample, self.per_step) if v is not None]
        if len(given) > 1:
            raise ValueError("give one of flops_per_token, flops_per_sample, flops_per_step")
        if any(not (isinstance(v, int | float) and math.isfinite(v) and v >= 0) for v in given):
            raise ValueError(f"FLOPs must be finite and non-negative, got {given[0]!r}")

    @property
    def known(self) -> bool:
        return self.per_token is not None or self.per_sample is not None or self.per_step is not None

    def of_step(self, samples: int, tokens: int) -> float:
        """The FLOPs of one step that processed `samples` and `tokens` (0 when none is known)."""
        if self.per_token is not None:
            return self.per_token * tokens
        if self.per_sample is not None:
            return self.per_sample * samples
        return self.per_step or 0.0
