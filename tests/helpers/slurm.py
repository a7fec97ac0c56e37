"""Running the shipped Slurm prolog and epilog (deploy/slurm/) as slurmd would: root, a bare environment."""

from __future__ import annotations

import subprocess
from pathlib import Path

SLURM = Path(__file__).resolve().parents[2] / "deploy" / "slurm"


def run_script(name: str, mapping_dir: Path, job_id: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`name` is prolog.sh or epilog.sh; `env` adds SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES and the like."""
    full_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_JOB_ID": job_id, "SLURM_JOB_USER": "alice",
                "SLURM_JOB_UID": "1000", "SLURMD_NODENAME": "node-01", "SLURM_SCRIPT_CONTEXT": name.split(".")[0]
                + "_slurmd", "TRAINMON_JOB_MAPPING_DIR": str(mapping_dir), **env}
    return subprocess.run(["/bin/sh", str(SLURM / name)], env=full_env, capture_output=True, text=True,
                          timeout=30, check=False)
