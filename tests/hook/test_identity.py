"""Job id resolution, NCCL environment capture and the package boundary of the hook."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainmon.hook.identity import PodRef, kubernetes_pod, nccl_env, resolve_job_id

MASTER = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize(("env", "expected"), [
    ({"TRAINMON_JOB_ID": "llama", "SLURM_JOB_ID": "7"}, "llama"),
    ({"SLURM_JOB_ID": "7", "SLURM_ARRAY_JOB_ID": "6", "SLURM_ARRAY_TASK_ID": "3"}, "6_3"),
    ({"SLURM_JOB_ID": "7", "TORCHELASTIC_RUN_ID": "abc"}, "7"),
    ({"TORCHELASTIC_RUN_ID": "abc", **MASTER}, "abc"),
    ({"TORCHELASTIC_RUN_ID": "none", **MASTER}, resolve_job_id(MASTER)),
    ({}, "unknown"),
])
def test_job_id_resolution_order(env: dict[str, str], expected: str) -> None:
    assert expected == resolve_job_id(env)


IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "HOSTNAME": "trainer-0-abcde"}


@pytest.mark.parametrize(("env", "expected"), [
    ({"POD_NAME": "trainer-0", "POD_NAMESPACE": "ml", **IN_POD}, PodRef("trainer-0", "ml")),  # downward API wins
    ({"POD_NAME": "trainer-0", "POD_NAMESPACE": "ml"}, PodRef("trainer-0", "ml")),
    (IN_POD, PodRef("trainer-0-abcde", "from-service-account")),
    ({"POD_NAMESPACE": "ml", **IN_POD}, PodRef("trainer-0-abcde", "ml")),
    ({"HOSTNAME": "login-node-3"}, PodRef("", "")),  # not in Kubernetes: HOSTNAME is no pod name
    ({}, PodRef("", "")),
    ({"POD_NAME": "p\x1b[31m" + "x" * 200, "POD_NAMESPACE": "ml\n"}, PodRef("p[31m" + "x" * 123, "ml")),
])
def test_kubernetes_pod(tmp_path: Path, env: dict[str, str], expected: PodRef) -> None:
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("from-service-account\n")

    assert expected == kubernetes_pod(env, namespace_file)


def test_pod_without_a_service_account_token_has_no_namespace(tmp_path: Path) -> None:
    assert PodRef("trainer-0-abcde", "") == kubernetes_pod(IN_POD, tmp_path / "absent")


def test_monitor_identity_carries_the_pod() -> None:
    from trainmon.torch import TrainingMonitor

    env = {"POD_NAME": "trainer-3", "POD_NAMESPACE": "ml", "TRAINMON_REPORT_INTERVAL": "60"}
    mon = TrainingMonitor(job_id="j", env=env)
    try:
        assert ("trainer-3", "ml") == (mon.identity.pod, mon.identity.namespace)
    finally:
        mon.close()


def test_master_address_hash_is_short_and_the_same_on_every_rank() -> None:
    job_id = resolve_job_id({**MASTER, "RANK": "0"})

    assert job_id == resolve_job_id({**MASTER, "RANK": "5"}) and len(job_id) == 12


def test_nccl_env_keeps_only_nccl_variables_and_at_most_32() -> None:
    env = {f"NCCL_V{i:02d}": "x" * 300 for i in range(40)} | {"TORCH_NCCL_ENABLE_TIMING": "1", "PATH": "/bin"}
    found = nccl_env(env)

    assert 32 == len(found) and "PATH" not in found and "TORCH_NCCL_ENABLE_TIMING" not in found
    assert {128} == {len(v) for v in found.values()}


def test_hook_imports_no_daemon_dependencies() -> None:
    """`import trainmon.torch` loads none of the daemon's stack beyond what torch itself loads (pynvml)."""
    code = ("import sys, torch; before = set(sys.modules); import trainmon.torch; trainmon.torch.TrainingMonitor; "
            "heavy = [m for m in ('prometheus_client', 'fastapi', 'uvicorn', 'pynvml', 'trainmon.collectors') "
            "if m in sys.modules and m not in before]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

    assert "[]" == out.strip()


def test_wire_and_sender_import_without_torch() -> None:
    code = "import sys, trainmon.wire, trainmon.hook.sender, trainmon.hook.state; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

    assert "False" == out.strip()
