"""promtool passes prometheus/tests/causes.test.yml, the incidents whose alert must name the cause and not its
victims (a file of its own, so that pytest-xdist runs it beside test_instability.py's promtool run)."""

from __future__ import annotations

import pytest

from tests.prometheus.rulefiles import CAUSES_TESTS, assert_promtool_tests_pass


@pytest.mark.slow
def test_promtool_passes_the_cause_scenarios() -> None:
    """A node's NVMe collapse, an hour-long 5% slowdown, a one-rank spike, a rising loss, slow and final
    checkpoints and a barrier inside a checkpoint phase: the cause is named, its victims are not (Debian
    promtool 2.42)."""
    assert_promtool_tests_pass(CAUSES_TESTS)
