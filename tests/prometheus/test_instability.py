"""prometheus/tests/instability.test.yml and causes.test.yml: their generator's output, and promtool passes the
first (a file of its own, so that pytest-xdist runs its promtool run beside test_rules.py's; test_causes_scenarios.py
runs the second)."""

from __future__ import annotations

import math

import pytest

from tests.prometheus import instability_scenarios as scenarios
from tests.prometheus.rulefiles import INSTABILITY_TESTS, assert_promtool_tests_pass, load


@pytest.mark.slow
def test_promtool_passes_the_instability_scenarios() -> None:
    """Six hours of a 64-rank job: each numerics alert fires on its incident and stays silent on the healthy
    runs (Debian promtool 2.42)."""
    assert_promtool_tests_pass(INSTABILITY_TESTS)


def test_every_numerics_alert_is_checked_firing_and_silent() -> None:
    checks = [check for output in scenarios.OUTPUTS for case in load(output)["tests"]
              for check in case["alert_rule_test"]]

    firing = {c["alertname"] for c in checks if c["exp_alerts"]}
    silent = {c["alertname"] for c in checks if not c["exp_alerts"]}

    assert firing == silent == set(scenarios.ALERTS)


def test_the_notation_rebuilds_counters_exactly_as_promtool_adds_them() -> None:
    """A run `a+bxn` whose float sum came out a hair above the next value would read as a counter reset."""
    values: list[float | None] = [None, None]
    total = 0.0
    for minute in range(200):
        total += 0.0 if minute % 60 in (45, 46) else scenarios.counter(59.0 + math.sin(minute) / 7)
        values.append(total)
    rebuilt: list[float | None] = []
    for token in scenarios.notation(values, ends=set()).split():
        if token in ("_", "stale"):
            rebuilt.append(None)
        elif token.startswith("_x"):
            rebuilt += [None] * int(token[2:])
        elif "x" in token:
            start, rest = token.split("+") if "+" in token else token.split("-")
            step, runs = rest.split("x")
            rebuilt += [float(start) + k * float(step) for k in range(int(runs) + 1)]
        else:
            rebuilt.append(float(token))

    assert rebuilt == values
