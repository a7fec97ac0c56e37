"""Back-off between NVML initialisation attempts."""

from __future__ import annotations

from trainmon.nvml.backoff import Backoff


def test_each_failure_doubles_the_wait_up_to_the_maximum() -> None:
    """5, 10, 20, 25 (capped) seconds; a success resets it."""
    backoff = Backoff(initial=5, maximum=25)
    waits = []
    for _ in range(4):
        backoff.failed(100)
        waits.append(backoff.retry_in(100))
    backoff.succeeded()

    assert [5, 10, 20, 25] == waits
    assert backoff.ready(100)


def test_not_ready_until_the_wait_has_passed() -> None:
    backoff = Backoff(initial=5)
    backoff.failed(100)

    assert (False, True) == (backoff.ready(104.9), backoff.ready(105))
