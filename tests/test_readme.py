"""The README's set-up commands come first; docs/metrics.md names every metric served."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.daemon import Daemon

README = Path(__file__).resolve().parents[1] / "README.md"
METRICS_DOC = README.parent / "docs" / "metrics.md"
CI_RUN = Path(__file__).resolve().parents[1] / ".ci" / "run"


def test_readme_starts_with_the_two_commands() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)

    # The first block runs for real on a fresh Debian 12 in tests/setup/test_fresh_debian.py.
    assert "/opt/trainmon/bin/trainmon serve" == blocks[0].strip().splitlines()[-1]
    assert "bash scripts/test.sh" == blocks[1].strip()
    assert "exec bash scripts/test.sh" in CI_RUN.read_text()


def test_every_served_metric_is_in_the_metrics_doc(demo: Daemon) -> None:
    """The demo (GPUs, its NVMe and InfiniBand tree, a job): every family it serves is documented."""
    daemon = demo
    text = METRICS_DOC.read_text()

    def served() -> set[str]:
        return {f.name for f in text_string_to_metric_families(daemon.metrics_text())
                if f.name.startswith("trainmon_")}

    names: set[str] = set()
    for _ in range(20):  # the demo's job reports within a few seconds
        names = served()
        if "trainmon_train_loss_scale" in names:
            break
        daemon.get("/healthz")

    undocumented = sorted(n for n in names if not mentioned(n, text))
    assert [] == undocumented, undocumented
    assert len(names) > 120


def mentioned(family: str, text: str) -> bool:
    """`family` (as the parser names it: no `_total`, no `_info`) is named in full in docs/metrics.md.

    The one exception is the mlx5 hw_counters row, which lists its families by their stems.
    """
    if any(f"`{c}`" in text for c in (family, f"{family}_total", f"{family}_info")):
        return True
    stem = family.removeprefix("trainmon_infiniband_")
    return stem != family and f"`{stem}`" in text.split("from `hw_counters/`", 1)[-1]
