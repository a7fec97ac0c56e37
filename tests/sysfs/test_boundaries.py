from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_import_boundaries import PACKAGE, imported_modules


@pytest.mark.parametrize("path", sorted((PACKAGE / "sysfs").glob("*.py")), ids=lambda p: p.name)
def test_records_know_nothing_of_metrics(path: Path) -> None:
    """The sysfs layer returns records; families are the collectors' (procfs knows no Prometheus)."""
    assert not {m for m in imported_modules(path)
                if m.startswith(("trainmon.collectors", "trainmon.families", "prometheus_client"))}
