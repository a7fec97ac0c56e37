"""A collective's payload: its bytes, and whether it lives on a GPU."""

from __future__ import annotations

import torch


def nbytes(payload: object) -> int:
    if isinstance(payload, torch.Tensor):
        return payload.nbytes
    if isinstance(payload, (list, tuple)):
        return sum(t.nbytes for t in payload if isinstance(t, torch.Tensor))
    return 0


def is_cuda(payload: object) -> bool:
    if isinstance(payload, (list, tuple)):
        payload = payload[0] if payload else None
    return isinstance(payload, torch.Tensor) and payload.is_cuda
