"""Exponential back-off for NVML initialisation and re-initialisation."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Backoff:
    """`ready(now)` says whether to try again; each failure doubles the wait up to `maximum`."""

    initial: float
    maximum: float = 300.0
    _delay: float = 0.0
    _not_before: float = 0.0

    def ready(self, now: float) -> bool:
        return now >= self._not_before

    def failed(self, now: float) -> None:
        self._delay = min(self.maximum, self._delay * 2 if self._delay else self.initial)
        self._not_before = now + self._delay

    def succeeded(self) -> None:
        self._delay = 0.0
        self._not_before = 0.0

    def retry_in(self, now: float) -> float:
        return max(0.0, self._not_before - now)
