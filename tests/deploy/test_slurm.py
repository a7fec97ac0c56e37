"""deploy/slurm/: the prolog and epilog, run for real with the environment slurmd gives them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.slurm import run_script


def mapping_of(directory: Path) -> dict[str, list[str]]:
    return {p.name: p.read_text().splitlines() for p in sorted(directory.iterdir()) if not p.name.startswith(".")}


@pytest.mark.parametrize(("env", "expected"), [
    ({"SLURM_JOB_GPUS": "0,1"}, {"0": ["71"], "1": ["71"]}),
    ({"SLURM_JOB_GPUS": "4-6"}, {"4": ["71"], "5": ["71"], "6": ["71"]}),
    ({"SLURM_JOB_GPUS": "0,2-3,7"}, {"0": ["71"], "2": ["71"], "3": ["71"], "7": ["71"]}),
    ({"CUDA_VISIBLE_DEVICES": "3"}, {"3": ["71"]}),  # no SLURM_JOB_GPUS: the job's devices
    ({"SLURM_JOB_GPUS": "1", "CUDA_VISIBLE_DEVICES": "0"}, {"1": ["71"]}),  # the node's index wins
    ({"CUDA_VISIBLE_DEVICES": "GPU-0000-aaaa,2"}, {"2": ["71"]}),  # a UUID names no mapping file
    ({}, {}),
])
def test_prolog_writes_a_file_per_gpu_index(tmp_path: Path, env: dict[str, str],
                                            expected: dict[str, list[str]]) -> None:
    mapping = tmp_path / "job-mapping"

    result = run_script("prolog.sh", mapping, "71", **env)

    assert 0 == result.returncode, result.stderr
    assert expected == (mapping_of(mapping) if mapping.exists() else {})


def test_shared_gpu_lists_each_job_once_and_epilog_keeps_the_other(tmp_path: Path) -> None:
    mapping = tmp_path / "job-mapping"
    for job_id in ("71", "72", "71"):
        run_script("prolog.sh", mapping, job_id, SLURM_JOB_GPUS="0,1")
    assert {"0": ["71", "72"], "1": ["71", "72"]} == mapping_of(mapping)

    assert 0 == run_script("epilog.sh", mapping, "71").returncode  # no GPU list: every file is searched
    assert {"0": ["72"], "1": ["72"]} == mapping_of(mapping)
    run_script("epilog.sh", mapping, "72", SLURM_JOB_GPUS="0,1")
    assert {} == mapping_of(mapping)


def test_scripts_never_fail_the_job(tmp_path: Path) -> None:
    """A failing Prolog or Epilog drains the node: problems go to stderr, the exit status stays 0."""
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    result = run_script("prolog.sh", blocked / "job-mapping", "71", SLURM_JOB_GPUS="0")
    assert 0 == result.returncode and "cannot create" in result.stderr
    no_job = run_script("prolog.sh", tmp_path / "m", "", SLURM_JOB_GPUS="0")
    assert 0 == no_job.returncode and "SLURM_JOB_ID is not set" in no_job.stderr
    assert 0 == run_script("epilog.sh", tmp_path / "absent", "71").returncode


def test_mapping_files_are_world_readable(tmp_path: Path) -> None:
    """The daemon runs unprivileged; slurmd writes as root."""
    mapping = tmp_path / "job-mapping"
    run_script("prolog.sh", mapping, "71", SLURM_JOB_GPUS="0")
    assert 0o644 == (mapping / "0").stat().st_mode & 0o777
    assert os.access(mapping, os.R_OK | os.X_OK)
