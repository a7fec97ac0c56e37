"""The README's set-up commands come first and its maps are the house (the collectors, the layout);
docs/metrics.md names every metric served."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.daemon import Daemon
from trainmon.collectors import AVAILABLE

README = Path(__file__).resolve().parents[1] / "README.md"
METRICS_DOC = README.parent / "docs" / "metrics.md"
CI_RUN = Path(__file__).resolve().parents[1] / ".ci" / "run"
REPO = README.parent
PACKAGE = REPO / "exporter" / "trainmon"
# The names a Layout line starts with: `nvml/, ingest/, http/`, `daemon.py, scheduler.py`.
LAYOUT_NAMES = re.compile(r"\s*([\w.]+(?:/|\.py)(?:, [\w.]+(?:/|\.py))*)")


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


def collectors_listed(readme: str) -> list[str]:
    """The collectors the README's "How it works" names, in its order."""
    bullet = readme.split("- **Collectors**", 1)[1].split("\n- **", 1)[0]
    return re.findall(r"`(\w+)`", bullet.split("):", 1)[1].split(";", 1)[0])


def layout(readme: str) -> tuple[list[str], list[str]]:
    """The Layout block's names: those under exporter/trainmon/ (indented) and those at the top."""
    block = re.search(r"## Layout\n\n```\n(.*?)```", readme, re.S)
    assert block is not None
    inside: list[str] = []
    top: list[str] = []
    for line in block.group(1).splitlines()[1:]:  # the first is exporter/trainmon/ itself
        names = LAYOUT_NAMES.match(line)
        assert names is not None, line
        (inside if line.startswith(" ") else top).extend(names.group(1).split(", "))
    return inside, top


def test_the_readme_lists_the_registrys_collectors() -> None:
    assert list(AVAILABLE) == collectors_listed(README.read_text())


def test_the_readmes_layout_names_every_package_directory_and_only_what_exists() -> None:
    inside, top = layout(README.read_text())
    directories = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))

    assert directories == sorted(name.rstrip("/") for name in inside if name.endswith("/"))
    assert [] == [name for name in inside if not (PACKAGE / name).exists()]
    assert [] == [name for name in top if not (REPO / name).exists()]
