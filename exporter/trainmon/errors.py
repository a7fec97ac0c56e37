"""Exceptions of the daemon.

TrainmonError
    ConfigError       a bad flag or environment value: one line, exit 2
    CollectorError    a collection failed: success 0
        NoData        the hardware is absent: success 1 (not a failure), logged at info when it starts
    MessageRejected   a bad ingest datagram: trainmon_ingest_rejected_total{reason}
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the hook imports this module: prometheus_client only for type checkers
    from trainmon.families import Metric


class TrainmonError(Exception):
    """Base of every trainmon exception."""


class ConfigError(TrainmonError, ValueError):
    """A flag or `TRAINMON_*` variable holds a value the daemon cannot use."""

    def __init__(self, flag: str, value: object, why: str) -> None:
        super().__init__(f"--{flag}={value!r}: {why}")
        self.flag = flag
        self.value = value
        self.why = why


class CollectorError(TrainmonError):
    """A collector could not produce its metrics this cycle.

    `families` are the few it can still vouch for (a GPU collector whose driver is gone still knows
    which GPUs it had and how many the PCI bus shows), served beside `trainmon_collector_success 0`.
    """

    def __init__(self, message: str, families: tuple[Metric, ...] = ()) -> None:
        super().__init__(message)
        self.families = families


class NoData(CollectorError):
    """The hardware a collector reads is not present on this node."""


class MessageRejected(TrainmonError, ValueError):
    """An ingest datagram failed validation; `reason` becomes a label value."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def error_line(error: BaseException | None) -> str:
    """One line for logs and status: the exception's type where its message alone would be unclear."""
    if error is None:
        return "unknown error"
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return text if text and type(error).__module__.startswith("trainmon") else f"{type(error).__name__}: {text}"
