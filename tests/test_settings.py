"""Settings: defaults have one source; the GPU-ownership flags enable their collectors beside --collectors."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmon.collectors import AVAILABLE
from trainmon.settings import Option, Settings, command_options, serve_options, settings_from
from trainmon.wire import SOCKET_ENV, UDP_ENV

OPTIONS = serve_options(list(AVAILABLE))


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.flag)
def test_each_default_shown_in_help_parses_back_to_the_settings_default(option: Option) -> None:
    assert option.parse(option.flag, option.default) == getattr(Settings(), option.field_name)


def test_no_options_are_the_settings_defaults_and_demo_keeps_its_own_interval() -> None:
    assert Settings() == settings_from({}, OPTIONS)
    assert ["1"] == [o.default for o in command_options("demo", list(AVAILABLE)) if o.flag == "interval"]


@pytest.mark.parametrize(("values", "collectors"), [
    ({}, ("gpu", "nvme", "infiniband", "aer", "training", "fs")),
    ({"kubelet_pod_resources_socket": "/k.sock"},
     ("gpu", "nvme", "infiniband", "aer", "training", "fs", "pod_resources")),
    ({"hpc_job_mapping_dir": "/m", "collectors": "gpu"}, ("gpu", "hpc_jobs")),
    ({"hpc_job_mapping_dir": "/m", "kubelet_pod_resources_socket": "/k.sock", "collectors": "gpu"},
     ("gpu", "pod_resources", "hpc_jobs")),
    ({"hpc_job_mapping_dir": "/m", "collectors": "hpc_jobs,gpu"}, ("hpc_jobs", "gpu")),  # named already: once
    ({"collectors": "gpu,hpc_jobs"}, ("gpu", "hpc_jobs")),  # the cgroup path alone, no directory
])
def test_ownership_flags_enable_their_collectors(values: dict[str, str], collectors: tuple[str, ...]) -> None:
    assert collectors == settings_from(values, OPTIONS).collectors


def test_ownership_flags_are_paths_and_off_by_default() -> None:
    settings = settings_from({"kubelet_pod_resources_socket": "/var/lib/kubelet/pod-resources/kubelet.sock",
                              "hpc_job_mapping_dir": "/var/lib/dcgm-exporter/job-mapping"}, OPTIONS)
    default = settings_from({}, OPTIONS)

    assert Path("/var/lib/kubelet/pod-resources/kubelet.sock") == settings.kubelet_pod_resources_socket
    assert Path("/var/lib/dcgm-exporter/job-mapping") == settings.hpc_job_mapping_dir
    assert (None, None) == (default.kubelet_pod_resources_socket, default.hpc_job_mapping_dir)


def test_nccl_collectors_are_off_by_default_and_ras_defaults_to_nccls_loopback_port() -> None:
    settings = settings_from({}, serve_options(tuple(AVAILABLE)))

    assert not {"nccl_inspector", "nccl_ras"} & set(settings.collectors)
    assert ("127.0.0.1", 28028, True) == (settings.nccl_ras_addr.host, settings.nccl_ras_addr.port,
                                          settings.nccl_ras_addr.is_loopback)
    remote = settings_from({"nccl_ras_addr": "10.0.0.7:28028", "nccl_ras_allow_remote": "true"},
                           serve_options(tuple(AVAILABLE)))
    assert "10.0.0.7" == remote.nccl_ras_addr.host


def test_the_hooks_variables_are_the_ingest_flags_environment_twins() -> None:
    env = {option.flag: option.env_name for option in OPTIONS}

    assert (SOCKET_ENV, UDP_ENV) == (env["ingest-socket"], env["ingest-udp"])
