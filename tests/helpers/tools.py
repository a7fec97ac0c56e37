"""Tests that need an external tool skip without it locally and fail in CI.

`.ci/run` sets TRAINMON_REQUIRE_TOOLS=1, which turns every such skip into a failure, so CI can
never pass by silently running less.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

# The virtual environment the tests run in holds tools too (kubectl, ruff, trainmon) even when it is not
# activated (`.venv/bin/python -m pytest`). sys.executable is not resolved: a venv's python is a symlink.
ENVIRONMENT_BIN = Path(sys.executable).parent


def require_tool(name: str, *candidates: str) -> str:
    """Return the path of the first of `name`, `*candidates` in this Python's environment or on PATH, or skip
    (fail in CI)."""
    search_path = os.pathsep.join([str(ENVIRONMENT_BIN), os.environ.get("PATH", os.defpath)])
    for candidate in (name, *candidates):
        found = shutil.which(candidate, path=search_path)
        if found:
            return found
    message = f"{name} is not installed (scripts/test.sh installs it)"
    if os.environ.get("TRAINMON_REQUIRE_TOOLS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def require(condition: bool, message: str) -> None:
    """Skip locally, fail in CI, when a prerequisite other than a binary is missing."""
    if condition:
        return
    if os.environ.get("TRAINMON_REQUIRE_TOOLS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def require_module(name: str, *, quiet: bool = False):  # type: ignore[no-untyped-def]
    """Import `name`, or skip locally and fail in CI (the test extra installs it). `quiet`: the warnings the
    package emits as it imports (megatron-core's about the torch APIs it uses) are not ours to fail on."""
    import importlib
    import warnings

    try:
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except ImportError:
        require(False, f"{name} is not installed (pip install -e '.[test]' brings it)")
