"""NVIDIA's Xid catalog: the generated table is current, and its buckets map to trainmon's actions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from trainmon.health.catalog import Action, action_of
from trainmon.health.xid_catalog import CATALOG

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "generate_xid_catalog.py"


def generator() -> ModuleType:
    """scripts/ is not a package: the script is loaded from its file, as `python scripts/…` runs it."""
    spec = importlib.util.spec_from_file_location("generate_xid_catalog", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_table_is_the_committed_csv_rendered() -> None:
    """Regenerate with `python scripts/generate_xid_catalog.py` when this fails."""
    script = generator()
    assert script.render(script.entries(script.SOURCE.read_text(encoding="utf-8"))) == script.TARGET.read_text()


def test_every_published_code_is_there() -> None:
    assert 172 == len(CATALOG)
    assert list(range(1, 173)) == sorted(CATALOG)
    assert "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY" == CATALOG[13].mnemonic


@pytest.mark.parametrize(("xid", "action"), [
    (13, Action.RESTART_APP), (31, Action.RESTART_APP), (43, Action.NONE), (63, Action.NONE),
    (48, Action.RESET_GPU), (62, Action.RESET_GPU), (95, Action.RESET_GPU), (119, Action.RESET_GPU),
    (74, Action.RESET_GPU), (145, Action.RESET_GPU), (79, Action.REBOOT), (151, Action.REBOOT),
    (54, Action.DRAIN), (1, Action.DRAIN),
])
def test_immediate_actions(xid: int, action: Action) -> None:
    assert action == action_of(CATALOG[xid])


def test_a_bucket_without_an_action_fails_the_generator(tmp_path: Path) -> None:
    text = "Code,Mnemonic,Description,Immediate Resolution,Investigatory Resolution\n9,X,Y,NEW_BUCKET,\n"
    with pytest.raises(SystemExit, match="NEW_BUCKET"):
        generator().entries(text)
