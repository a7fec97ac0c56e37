"""Who a rank is, from the environment: job id, NCCL settings, Kubernetes pod. Standard library only."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainmon.wire import MAX_ENV, MAX_TEXT, NCCL_ENV_PREFIXES

# Mounted into every pod that has a service-account token (most do).
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True, slots=True)
class PodRef:
    """The Kubernetes pod a rank runs in; empty strings outside Kubernetes."""

    pod: str = ""
    namespace: str = ""


def resolve_job_id(env: Mapping[str, str]) -> str:
    """The job id when none is given (SPEC §5), the same on every rank of a job.

    `TRAINMON_JOB_ID`, then Slurm's (`<array job>_<task>` for arrays), then `TORCHELASTIC_RUN_ID`
    unless it is torchrun's default `none`, then a short hash of `MASTER_ADDR:MASTER_PORT`, then
    `unknown`.
    """
    if env.get("TRAINMON_JOB_ID"):
        return env["TRAINMON_JOB_ID"][:MAX_TEXT]
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"[:MAX_TEXT]
    if env.get("SLURM_JOB_ID"):
        return env["SLURM_JOB_ID"][:MAX_TEXT]
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return run_id[:MAX_TEXT]
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return hashlib.sha256(f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}".encode()).hexdigest()[:12]
    return "unknown"


def kubernetes_pod(env: Mapping[str, str], namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE) -> PodRef:
    """`POD_NAME`/`POD_NAMESPACE` from the downward API; else, in a pod (`KUBERNETES_SERVICE_HOST` is
    set), `HOSTNAME` (the pod name unless the spec overrides it) and the service account's namespace file.
    """
    pod, namespace = env.get("POD_NAME", ""), env.get("POD_NAMESPACE", "")
    if env.get("KUBERNETES_SERVICE_HOST"):
        pod = pod or env.get("HOSTNAME", "")
        if not namespace:
            try:
                namespace = namespace_file.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                namespace = ""
    return PodRef(pod=_label_text(pod), namespace=_label_text(namespace))


def _label_text(value: str) -> str:
    """Printable and at most MAX_TEXT, as every label value on the wire must be."""
    return "".join(c for c in value if c.isprintable())[:MAX_TEXT]


def nccl_env(env: Mapping[str, str]) -> dict[str, str]:
    """The `NCCL_*` and `TORCH_NCCL_*` variables set, at most `MAX_ENV`, values cut to `MAX_TEXT`."""
    names = sorted(k for k in env if k.startswith(NCCL_ENV_PREFIXES) and len(k) <= MAX_TEXT and k.isprintable())
    return {k: "".join(c for c in env[k] if c.isprintable())[:MAX_TEXT] for k in names[:MAX_ENV]}


def int_env(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "")
    return int(value) if value.isdigit() else None


def launch_layout(env: Mapping[str, str]) -> tuple[int, int, int | None]:
    """Rank, world size and local rank outside `torch.distributed`: torchrun's variables, else a lone
    process, rank 0 of 1 on local rank 0."""
    world_size = int_env(env, "WORLD_SIZE") or 1
    local_rank = int_env(env, "LOCAL_RANK")
    if local_rank is None and world_size == 1:
        local_rank = 0
    return int_env(env, "RANK") or 0, world_size, local_rank
