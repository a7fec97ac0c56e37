"""tests/helpers/tools.py finds the tools scripts/test.sh puts in the virtual environment (kubectl, ruff),
also when that environment is not activated."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import tools


def test_a_tool_in_the_running_environment_is_found_off_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    environment_bin = tmp_path / "venv" / "bin"
    environment_bin.mkdir(parents=True)
    kubectl = environment_bin / "kubectl"
    kubectl.write_text("#!/bin/sh\n")
    kubectl.chmod(0o755)
    monkeypatch.setattr(tools, "ENVIRONMENT_BIN", environment_bin)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    assert str(kubectl) == tools.require_tool("kubectl")
