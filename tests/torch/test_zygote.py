"""A rank forked by tests.torch.zygote is what `python -m MODULE ARGS` would have been, torch imported."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.torch.jobs import REPO, Rank, zygote


def probe(tmp_path: Path, code: str, **env: str) -> tuple[Rank, Path]:
    log = tmp_path / f"{code}.log"
    return zygote().start("tests.torch.probe_job", [str(tmp_path / f"{code}.json"), code], env, log), log


def seen(tmp_path: Path, code: str) -> dict[str, Any]:
    return dict(json.loads((tmp_path / f"{code}.json").read_text()))


def test_a_forked_rank_runs_its_module_as_main_with_its_own_argv_env_and_output(tmp_path: Path) -> None:
    rank, log = probe(tmp_path, "3", ONLY_THIS="1")

    assert 3 == rank.wait(timeout=60)
    state = seen(tmp_path, "3")
    assert {"ONLY_THIS": "1"} == state["env"]  # the request's environment, nothing of the zygote's
    assert (str(REPO), "__main__", "") == (state["cwd"], state["name"], state["stdin"])
    assert [str(REPO / "tests" / "torch" / "probe_job.py"), str(tmp_path / "3.json"), "3"] == state["argv"]
    assert state["torch_imported_before"]
    lines = log.read_text().splitlines()  # the streams' order is their buffering's, as under `python -m`
    assert (["to stderr", "to stdout"], ["thread finished", "atexit ran"]) == (sorted(lines[:2]), lines[2:])


def test_an_uncaught_exception_exits_1_with_its_traceback_in_the_log(tmp_path: Path) -> None:
    rank, log = probe(tmp_path, "raise")

    assert 1 == rank.wait(timeout=60)
    assert "RuntimeError: the job failed" in log.read_text()


def test_a_killed_rank_reads_as_killed_and_a_wait_past_its_timeout_raises(tmp_path: Path) -> None:
    rank, _ = probe(tmp_path, "hang")

    with pytest.raises(subprocess.TimeoutExpired):
        rank.wait(timeout=0.5)
    assert rank.poll() is None
    rank.kill()
    assert -signal.SIGKILL == rank.wait(timeout=60) == rank.returncode
