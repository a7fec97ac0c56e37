"""A clock a test moves by hand, passed where the code takes a `clock` callable."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now
