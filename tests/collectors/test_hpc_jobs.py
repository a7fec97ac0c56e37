"""The hpc_jobs collector: a mapping directory the shipped prolog writes, and Slurm cgroups in a procfs tree."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_nvml import scenario as scenarios
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.helpers.catalog import assert_declared
from tests.helpers.clock import Clock
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.metrics import parse_samples, samples_of
from tests.helpers.net import wait_until
from tests.helpers.slurm import run_script
from tests.helpers.trees import write
from trainmon.catalog.hpc_jobs import GPU_JOB_INFO
from trainmon.collectors.base import NodeResources
from trainmon.collectors.hpc_jobs import MAX_JOBS_PER_GPU, MAX_MAPPING_BYTES, HpcJobsCollector, read_mapping
from trainmon.gpu_inventory import GpuInventory, InventoryGpu
from trainmon.settings import Settings

JOB = "trainmon_gpu_job_info"
CGROUP_V2 = "0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"


def uuid(index: int) -> str:
    return scenarios.gpu(index)["uuid"]


def job(index: int, job_id: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return (JOB, frozenset({"gpu": str(index), "uuid": uuid(index), "scheduler": "slurm", "job_id": job_id}.items()))


def inventory_of(pids: dict[int, tuple[int, ...] | None], count: int = 8) -> GpuInventory:
    inventory = GpuInventory()
    inventory.publish(InventoryGpu(index=i, uuid=uuid(i), pids=pids.get(i, ())) for i in range(count))
    return inventory


def test_prolog_mapping_and_cgroup_fallback(tmp_path: Path) -> None:
    """GPUs 0-3 from the prolog's files; GPU 4 from its process's cgroup; GPU 6's process has exited."""
    mapping = tmp_path / "job-mapping"
    assert 0 == run_script("prolog.sh", mapping, "4242", SLURM_JOB_GPUS="0,1").returncode
    assert 0 == run_script("prolog.sh", mapping, "5000", SLURM_JOB_GPUS="2-3").returncode
    procfs = tmp_path / "proc"
    write(procfs / "4004" / "cgroup", CGROUP_V2.format(job=6000))
    write(procfs / "4005" / "cgroup", "0::/user.slice/user-1000.slice/session-3.scope\n")  # no job
    inventory = inventory_of({0: (4000,), 4: (4004,), 5: (4005,), 6: (4006,)})
    settings = Settings(hpc_job_mapping_dir=mapping, procfs=procfs)

    got = HpcJobsCollector(settings, NodeResources(gpus=inventory)).collect()

    assert {job(0, "4242"), job(1, "4242"), job(2, "5000"), job(3, "5000"), job(4, "6000")} == set(
        samples_of(got.families))
    assert ("gpu 6: pid 4006: exited before its cgroup was read",) == got.skipped
    assert {GPU_JOB_INFO.name} == assert_declared(got.families, "hpc_jobs")
    assert {"0": "mapping", "3": "mapping", "4": "cgroup"}.items() <= dict(got.details["job_sources"]).items()  # type: ignore[call-overload]



def test_a_users_own_cgroup_named_like_a_job_claims_nothing(tmp_path: Path) -> None:
    """A user may make cgroups under their delegated slice and call one job_31337: only slurmd's count."""
    procfs = tmp_path / "proc"
    write(procfs / "4000" / "cgroup", "0::/user.slice/user-1000.slice/user@1000.service/app.slice/job_31337/x\n")
    write(procfs / "4001" / "cgroup", CGROUP_V2.format(job=6001))
    settings = Settings(procfs=procfs)

    got = HpcJobsCollector(settings, NodeResources(gpus=inventory_of({0: (4000,), 1: (4001,)}))).collect()

    assert {job(1, "6001")} == set(samples_of(got.families))

def test_epilog_removal_is_seen_at_the_next_refresh_only(tmp_path: Path) -> None:
    mapping = tmp_path / "job-mapping"
    run_script("prolog.sh", mapping, "4242", SLURM_JOB_GPUS="0")
    run_script("prolog.sh", mapping, "4243", SLURM_JOB_GPUS="0")  # a shared GPU holds both
    clock = Clock(1000.0)
    jobs = HpcJobsCollector(Settings(hpc_job_mapping_dir=mapping), NodeResources(gpus=inventory_of({})), clock=clock)
    assert {job(0, "4242"), job(0, "4243")} == set(samples_of(jobs.collect().families))

    run_script("epilog.sh", mapping, "4242", SLURM_JOB_GPUS="0")
    clock.now += 29
    assert {job(0, "4242"), job(0, "4243")} == set(samples_of(jobs.collect().families)), "read every 30 s"
    clock.now += 1
    assert {job(0, "4243")} == set(samples_of(jobs.collect().families))
    run_script("epilog.sh", mapping, "4243")
    clock.now += 30
    assert not samples_of(jobs.collect().families)
    assert not list(mapping.glob("[0-9]*"))


def test_bad_mapping_files_drop_only_their_gpu(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mapping = tmp_path / "job-mapping"
    write(mapping / "0", "4242\n")
    write(mapping / "1", "")
    write(mapping / "2", "9" * (MAX_MAPPING_BYTES + 10))
    (mapping / "3").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe")
    write(mapping / "4", "4244\n$(reboot)\n")
    os.symlink(mapping / "gone", mapping / "5")
    os.mkfifo(mapping / "6")  # must not block the collector
    write(mapping / "9", "4249\n")  # no GPU 9 here
    write(mapping / "README", "not a mapping file\n")
    procfs = tmp_path / "proc"
    write(procfs / "4001" / "cgroup", CGROUP_V2.format(job=7001))  # GPU 1's empty file: its process says
    settings = Settings(hpc_job_mapping_dir=mapping, procfs=procfs)
    jobs = HpcJobsCollector(settings, NodeResources(gpus=inventory_of({1: (4001,)})), refresh_s=0)

    with caplog.at_level(logging.WARNING):
        first = jobs.collect()
        second = jobs.collect()

    assert {job(0, "4242"), job(1, "7001"), job(4, "4244")} == set(samples_of(first.families))
    assert ["mapping file 1: empty", "mapping file 2: over 65536 bytes",
            "mapping file 3: binary, not job ids a line",
            "mapping file 4: 1 line(s) that are not job ids, first line 2",
            "mapping file 5: a symbolic link, not followed", "mapping file 6: not a regular file",
            "mapping file 9: no GPU 9 on this node"] == list(first.skipped)
    assert first.skipped == second.skipped
    assert len(first.skipped) == len([r for r in caplog.records if "collector dropped data" in r.getMessage()])



SECRET = "token: s3cr3t-only-root-reads-this"


def hostile_mapping(tmp_path: Path) -> Path:
    """What a user who could write in the mapping directory plants: links to a root-only file and to
    /proc/self/status, a FIFO, a file of their own, and a root-owned file whose first line is a secret."""
    mapping, secret = tmp_path / "job-mapping", tmp_path / "secret"
    write(secret, SECRET + "\n")
    secret.chmod(0o600)
    mapping.mkdir()
    os.symlink(secret, mapping / "0")
    os.symlink("/proc/self/status", mapping / "1")
    os.mkfifo(mapping / "2")
    write(mapping / "3", "4243\n")
    os.chown(mapping / "3", 1000, 1000)
    write(mapping / "4", SECRET + "\n4244\n")
    return mapping


def test_links_fifos_and_foreign_files_are_refused_and_no_note_quotes_a_file(tmp_path: Path) -> None:
    settings = Settings(hpc_job_mapping_dir=hostile_mapping(tmp_path), procfs=tmp_path / "proc")

    got = HpcJobsCollector(settings, NodeResources(gpus=inventory_of({}))).collect()

    assert {job(4, "4244")} == set(samples_of(got.families))
    assert ["mapping file 0: a symbolic link, not followed", "mapping file 1: a symbolic link, not followed",
            "mapping file 2: not a regular file", "mapping file 3: owned by uid 1000, not by uid 0",
            "mapping file 4: 1 line(s) that are not job ids, first line 1"] == list(got.skipped)


@pytest.mark.slow
def test_the_daemon_serves_no_mapping_files_content(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                    daemons: list[Daemon]) -> None:
    """Neither the status API, nor /metrics, nor the log holds a planted file's first line."""
    mapping = hostile_mapping(tmp_path)
    scenario = scenarios.write(tmp_path / "scenario.json", scenarios.node(8))
    daemon = start_daemon(tmp_path, ["--collectors", "gpu", "--interval", "0.5", "--sysfs", str(tmp_path),
                                     "--procfs", str(tmp_path / "proc"), "--hpc-job-mapping-dir", str(mapping)],
                          env={"FAKE_NVML_SCENARIO": str(scenario), "LD_LIBRARY_PATH": str(fake_nvml_dir)})
    daemons.append(daemon)

    wait_until(lambda: job(4, "4244") in parse_samples(daemon.metrics_text()), timeout=20)
    status = daemon.get("/api/v1/status").text
    served = status + daemon.metrics_text() + daemon.log()
    assert "s3cr3t" not in served
    assert "Name:" not in served  # /proc/self/status's first line
    assert "mapping file 4: 1 line(s) that are not job ids, first line 1" in status
    assert job(3, "4243") not in parse_samples(daemon.metrics_text())


def test_crowded_and_foreign_script_mapping_files_are_bounded(tmp_path: Path) -> None:
    """8 GPUs x 8,000 job ids: MAX_JOBS_PER_GPU series a GPU, the rest counted; a file named with an
    Arabic-Indic digit is no GPU's; Arabic-Indic digits and a 60,000-digit line are no job ids."""
    mapping = tmp_path / "job-mapping"
    mapping.mkdir()
    for index in range(8):
        (mapping / str(index)).write_text("".join(f"{index}{n:05d}\n" for n in range(8_000)))
    (mapping / "\u0663").write_text("4242\n")
    (mapping / "1").write_text("\u0664\u0662\n" + "9" * 60_000 + "\n")  # GPU 1's file now holds no job id

    got = HpcJobsCollector(Settings(hpc_job_mapping_dir=mapping), NodeResources(gpus=inventory_of({}))).collect()

    served = samples_of(got.families)
    assert 7 * MAX_JOBS_PER_GPU == len(served)
    assert {str(i) for i in range(8) if i != 1} == {dict(labels)["gpu"] for _, labels in served}
    written = {f"{i}{n:05d}" for i in range(8) for n in range(8_000)}
    assert not {dict(labels)["job_id"] for _, labels in served} - written
    assert 7 * (8_000 - MAX_JOBS_PER_GPU) == got.details["jobs_not_served"]
    assert f"gpu 0: {8_000 - MAX_JOBS_PER_GPU} more jobs not served (at most {MAX_JOBS_PER_GPU} a GPU)" in got.skipped
    assert max(map(len, got.skipped)) < 400


def test_absent_directory_is_no_job_yet(tmp_path: Path) -> None:
    assert ({}, ()) == (read_mapping(tmp_path / "none").jobs, read_mapping(tmp_path / "none").problems)


@pytest.mark.slow
def test_daemon_attributes_fake_nvml_gpus_to_slurm_jobs(tmp_path: Path, fake_nvml_dir: Path,  # noqa: F811
                                                        daemons: list[Daemon]) -> None:
    """A real daemon: the prolog's mapping for GPUs 0-1, cgroups (of the fake NVML's pids) for 2-3."""
    mapping = tmp_path / "job-mapping"
    run_script("prolog.sh", mapping, "4242", CUDA_VISIBLE_DEVICES="0,1")
    procfs = tmp_path / "proc"
    write(procfs / "4002" / "cgroup", CGROUP_V2.format(job=5002))  # the fake NVML's GPU 2 process
    scenario = scenarios.write(tmp_path / "scenario.json", scenarios.node(4))  # GPU 3's pid 4003: no /proc entry
    daemon = start_daemon(tmp_path, ["--collectors", "gpu", "--interval", "0.5", "--sysfs", str(tmp_path),
                                     "--procfs", str(procfs), "--hpc-job-mapping-dir", str(mapping)],
                          env={"FAKE_NVML_SCENARIO": str(scenario), "LD_LIBRARY_PATH": str(fake_nvml_dir)})
    daemons.append(daemon)

    wait_until(lambda: {job(0, "4242"), job(1, "4242"), job(2, "5002")} == {
        k for k in parse_samples(daemon.metrics_text()) if k[0] == JOB}, timeout=20)
    status = daemon.get("/api/v1/status").json()
    hpc = next(c for c in status["collectors"] if c["name"] == "hpc_jobs")
    assert "ok" == hpc["state"]
    assert "4242" in " ".join(hpc["found"])
    assert ["gpu 3: pid 4003: exited before its cgroup was read"] == hpc["skipped"]


def test_check_reports_the_jobs_with_the_environment_twin(tmp_path: Path, fake_nvml_dir: Path) -> None:  # noqa: F811
    mapping = tmp_path / "job-mapping"
    run_script("prolog.sh", mapping, "4242", SLURM_JOB_GPUS="1")
    scenario = scenarios.write(tmp_path / "scenario.json", scenarios.node(2))
    env = {"PATH": "/usr/bin:/bin", "FAKE_NVML_SCENARIO": str(scenario), "LD_LIBRARY_PATH": str(fake_nvml_dir),
           "TRAINMON_HPC_JOB_MAPPING_DIR": str(mapping), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}

    result = subprocess.run([sys.executable, "-m", "trainmon", "check", "--collectors", "gpu", "--procfs",
                             str(tmp_path / "proc"), "--sysfs", str(tmp_path)], capture_output=True, text=True,
                            timeout=60, env=env)

    assert 0 == result.returncode, result.stdout + result.stderr
    assert f"gpu 1 {uuid(1)}: slurm job 4242 (from the mapping)" in result.stdout
