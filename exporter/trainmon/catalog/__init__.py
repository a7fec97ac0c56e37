"""Every metric family trainmon serves or records, declared once (client_python's `describe()`, static).

One module per collector holds its families as typed constants and a `FAMILIES` table; collectors build
their families from them, and the rule and dashboard generators, `diagnose`, `top`, the fleet profile and
docs/metrics.md spell a name only through them. Standard library only: the ground floor of the package.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from trainmon.catalog import (
    aer,
    daemon,
    fs,
    gpu,
    hpc_jobs,
    infiniband,
    nccl_inspector,
    nccl_ras,
    nvme,
    pod_resources,
    recorded,
    training,
)
from trainmon.catalog.family import PREFIX, Family, Kind

__all__ = ["BY_NAME", "BY_SOURCE", "FAMILIES", "PREFIX", "Family", "Kind", "undeclared"]

# Who makes each family: a collector by its `--collectors` name, the daemon itself, or Prometheus's rules.
BY_SOURCE: Mapping[str, tuple[Family, ...]] = {
    "gpu": gpu.FAMILIES,
    "nvme": nvme.FAMILIES,
    "infiniband": infiniband.FAMILIES,
    "aer": aer.FAMILIES,
    "training": training.FAMILIES,
    "pod_resources": pod_resources.FAMILIES,
    "hpc_jobs": hpc_jobs.FAMILIES,
    "fs": fs.FAMILIES,
    "nccl_inspector": nccl_inspector.FAMILIES,
    "nccl_ras": nccl_ras.FAMILIES,
    "daemon": daemon.FAMILIES,
    "rules": recorded.FAMILIES,
}

FAMILIES: tuple[Family, ...] = tuple(family for families in BY_SOURCE.values() for family in families)
BY_NAME: Mapping[str, Family] = {family.name: family for family in FAMILIES}

# A metric name in PromQL, JSON or Markdown; a recording rule's `level:metric:operations` is one token.
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_DECLARED = frozenset({*BY_NAME, *(series for family in FAMILIES for series in family.series)})


def _declared(token: str) -> bool:
    """A family's name or series; a prefix (`trainmon_gpu_`, as in `trainmon_gpu_*`) that one starts with."""
    if token.endswith("_"):
        return any(name.startswith(token) for name in _DECLARED)
    return token in _DECLARED


def undeclared(texts: Iterable[str]) -> list[str]:
    """The `trainmon_*` metric names in `texts` that no family declares, sorted, each once.

    Recording-rule names (`job_id:trainmon_train_steps:avg_rate5m`) carry colons and are not families.
    """
    return sorted({token for text in texts for token in _NAME.findall(text)
                   if token.startswith(PREFIX) and ":" not in token and not _declared(token)})
