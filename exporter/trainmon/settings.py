"""The daemon's configuration: flags and their `TRAINMON_*` environment twins (SPEC §2).

`Settings` is frozen and its field defaults are the defaults; `serve_options` is the one table of
flags, each with its parser and help, showing the `Settings` default as its text, so the command
line, the environment and the documentation agree.
"""

from __future__ import annotations

import grp
import ipaddress
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trainmon.errors import ConfigError
from trainmon.profiles import PROFILES
from trainmon.wire import DEFAULT_SOCKET

DEFAULT_COLLECTORS = ("gpu", "nvme", "infiniband", "aer", "training", "fs")
# Setting one of these flags enables its collector (GPU ownership, SPEC §4) beside --collectors.
FLAG_COLLECTORS = {"kubelet_pod_resources_socket": "pod_resources", "hpc_job_mapping_dir": "hpc_jobs"}


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    listen: Address = Address("0.0.0.0", 9842)
    interval: float = 5.0
    collectors: tuple[str, ...] = DEFAULT_COLLECTORS
    procfs: Path = Path("/proc")
    sysfs: Path = Path("/sys")
    devfs: Path = Path("/dev")
    nvme_devices: re.Pattern[str] | None = None
    infiniband_devices: re.Pattern[str] | None = None
    gpu_processes: bool = False
    ingest_socket: str = DEFAULT_SOCKET
    ingest_socket_mode: int = 0o660
    ingest_socket_group: str | None = None
    # A Unix datagram socket systemd bound for us (trainmon.socket), used instead of binding ingest_socket.
    ingest_socket_fd: int | None = None
    ingest_udp: Address | None = None
    ingest_udp_allow_remote: bool = False
    rank_ttl: float = 600.0
    max_ranks: int = 128
    max_training_series: int = 8000
    exit_retention: float = 3600.0
    # An exited rank's final values stay this long: at least two scrape intervals (15 s in the shipped
    # Prometheus configuration, 1 m in Prometheus' own default), plus the daemon's one interval of lag.
    exited_rank_retention: float = 60.0
    web_config: Path | None = None
    kubelet_pod_resources_socket: Path | None = None
    kubelet_pod_resources_refresh: float = 30.0
    hpc_job_mapping_dir: Path | None = None
    fs_mounts: re.Pattern[str] | None = None
    gpfs_mmpmon: Path | None = None
    kmsg: Path = Path("/dev/kmsg")
    nccl_inspector_dir: Path | None = None
    nccl_inspector_json_dir: Path | None = None
    nccl_ras_addr: Address = Address("127.0.0.1", 28028)
    nccl_ras_allow_remote: bool = False
    nccl_ras_max_bytes: int = 8 << 20
    state_dir: Path | None = Path("/var/lib/trainmon")
    state_read_only: bool = False  # `trainmon check` reads the state the daemon keeps, never writes it
    web_max_requests: int = 40
    web_header_timeout: float = 10.0
    log_level: str = "info"
    profile: str = "full"

    @property
    def collector_timeout(self) -> float:
        """How long one collector may run in a cycle before it is reported as hung."""
        return max(1.0, self.interval * 0.8)


def parse_address(flag: str, text: str) -> Address:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(flag, text, "expected HOST:PORT with a port in 1-65535")
    host = host.strip("[]") or "0.0.0.0"
    return Address(host, int(port))


def parse_seconds(flag: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(flag, text, "expected a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise ConfigError(flag, text, "must be a positive, finite number of seconds")
    return value


def parse_positive_int(flag: str, text: str) -> int:
    if not text.strip().isdigit() or int(text) <= 0:
        raise ConfigError(flag, text, "expected a positive integer")
    return int(text)


def parse_regex(flag: str, text: str) -> re.Pattern[str] | None:
    if text == "":
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise ConfigError(flag, text, f"not a regular expression ({exc})") from None


def parse_mode(flag: str, text: str) -> int:
    try:
        mode = int(text, 8)
    except ValueError:
        raise ConfigError(flag, text, "expected an octal file mode such as 0660") from None
    if not 0 <= mode <= 0o777:
        raise ConfigError(flag, text, "expected an octal file mode such as 0660")
    return mode


def parse_bool(flag: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ConfigError(flag, text, "expected true or false")


def parse_log_level(flag: str, text: str) -> str:
    level = text.strip().lower()
    if not isinstance(logging.getLevelName(level.upper()), int):  # a name's number; getLevelNamesMapping is 3.11+
        raise ConfigError(flag, text, "expected one of debug, info, warning, error")
    return level


def parse_collectors(available: Sequence[str]) -> Callable[[str, str], tuple[str, ...]]:
    def parse(flag: str, text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
        unknown = [n for n in names if n not in available]
        if unknown:
            raise ConfigError(flag, text, f"unknown collector {', '.join(unknown)}; known: {', '.join(available)}")
        return names

    return parse


def parse_profile(flag: str, text: str) -> str:
    if text not in PROFILES:
        raise ConfigError(flag, text, f"expected one of {', '.join(PROFILES)}")
    return text


def parse_path(flag: str, text: str) -> Path:
    if not text:
        raise ConfigError(flag, text, "expected a path")
    return Path(text)


def parse_optional_path(flag: str, text: str) -> Path | None:
    return Path(text) if text else None


def parse_optional_address(flag: str, text: str) -> Address | None:
    return parse_address(flag, text) if text else None


def parse_text(flag: str, text: str) -> str:
    return text


def parse_group(flag: str, text: str) -> str | None:
    if not text:
        return None
    try:
        grp.getgrnam(text) if not text.isdigit() else grp.getgrgid(int(text))
    except KeyError:
        raise ConfigError(flag, text, "no such group on this host") from None
    return text


def show_default(value: object) -> str:
    """A `Settings` default as option text: what `--help` shows and what the option's parser reads back."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def show_mode(mode: int) -> str:
    return f"{mode:04o}"


DEFAULT_SETTINGS = Settings()


@dataclass(frozen=True, slots=True)
class Option:
    """One `--flag`, its `TRAINMON_*` twin, and how its text becomes a `Settings` field.

    Its default is the `Settings` field's default, shown as text by `show` (one source for both);
    a subcommand with its own default (`demo --interval`) sets `own_default`.
    """

    flag: str
    parse: Callable[[str, str], object]
    help: str
    is_switch: bool = False
    show: Callable[[Any], str] = show_default
    own_default: str | None = None

    @property
    def default(self) -> str:
        if self.own_default is not None:
            return self.own_default
        return self.show(getattr(DEFAULT_SETTINGS, self.field_name))

    @property
    def field_name(self) -> str:
        return self.flag.replace("-", "_")

    @property
    def env_name(self) -> str:
        return "TRAINMON_" + self.field_name.upper()


def serve_options(available_collectors: Sequence[str]) -> tuple[Option, ...]:
    return (
        Option("listen", parse_address, "HTTP address, HOST:PORT"),
        Option("interval", parse_seconds, "background collection period in seconds (also the GPM window)"),
        Option("collectors", parse_collectors(available_collectors),
               f"comma list of enabled collectors ({', '.join(available_collectors)})"),
        Option("procfs", parse_path, "procfs root (containers mount the host's here)"),
        Option("sysfs", parse_path, "sysfs root (containers mount the host's here)"),
        Option("devfs", parse_path, "/dev root where NVIDIA device nodes are looked for: a node with none, no "
               "NVIDIA GPU on the PCI bus and no NVML library or driver has no GPUs (gpu collector no_data)"),
        Option("nvme-devices", parse_regex, "regex: only NVMe namespaces whose name matches"),
        Option("infiniband-devices", parse_regex, "regex: only InfiniBand devices whose name matches"),
        Option("gpu-processes", parse_bool, "per-process framebuffer series (pids churn series)",
               is_switch=True),
        Option("ingest-socket", parse_text, 'Unix datagram socket the training hook reports to; "" disables'),
        Option("ingest-socket-mode", parse_mode, "ingest socket permissions (octal)", show=show_mode),
        Option("ingest-socket-group", parse_group, "group that owns the ingest socket"),
        Option("ingest-udp", parse_optional_address, "HOST:PORT for UDP ingest (off by default)"),
        Option("ingest-udp-allow-remote", parse_bool, "allow a non-loopback --ingest-udp host",
               is_switch=True),
        Option("rank-ttl", parse_seconds, "seconds of silence after which a training rank is dropped"),
        Option("max-ranks", parse_positive_int, "cap on live (job_id, rank) pairs"),
        Option("max-training-series", parse_positive_int,
               "cap on the series the training collector serves; a new rank that would pass it is refused"),
        Option("exit-retention", parse_seconds,
               "seconds a job's rank-exit series stay after its last rank is gone"),
        Option("exited-rank-retention", parse_seconds,
               "seconds a rank that exited keeps its final values served, marked by trainmon_train_rank_exited "
               "(at least two scrape intervals, so the last steps are scraped); one that ended through an error "
               "stays while its job has live ranks on the node (they likely wait for it: a hang's gone class)"),
        Option("web-config", parse_optional_path, "TLS and basic auth file (exporter-toolkit format)"),
        Option("kubelet-pod-resources-socket", parse_optional_path,
               "kubelet PodResources gRPC socket (usually /var/lib/kubelet/pod-resources/kubelet.sock); "
               "enables trainmon_gpu_allocation_info"),
        Option("kubelet-pod-resources-refresh", parse_seconds, "how often the kubelet is asked, in the background"),
        Option("hpc-job-mapping-dir", parse_optional_path,
               "GPU-to-job mapping directory (DCGM format, written by Slurm prolog/epilog); "
               'enables trainmon_gpu_job_info{scheduler="slurm"}'),
        Option("fs-mounts", parse_regex,
               "regex: only network/parallel file-system mounts whose mount point matches (collector fs)"),
        Option("gpfs-mmpmon", parse_optional_path,
               "run this mmpmon (-p -s, fs_io_s) in the background for GPFS mounts (needs root)"),
        Option("kmsg", parse_path, "kernel log read for XIDs (the ring buffer from its start, then followed); "
               "a regular file is read the same way"),
        Option("nccl-inspector-dir", parse_optional_path,
               "NCCL Inspector's Prometheus textfile directory (NCCL_INSPECTOR_DUMP_DIR with "
               "NCCL_INSPECTOR_PROM_DUMP=1), read by the nccl_inspector collector"),
        Option("nccl-inspector-json-dir", parse_optional_path,
               "NCCL Inspector's JSON dump directory (NCCL_INSPECTOR_DUMP_DIR), read by the nccl_inspector collector"),
        Option("nccl-ras-addr", parse_address, "NCCL RAS address the nccl_ras collector polls (NCCL_RAS_ADDR)"),
        Option("nccl-ras-allow-remote", parse_bool, "allow a non-loopback --nccl-ras-addr host", is_switch=True),
        Option("nccl-ras-max-bytes", parse_positive_int,
               "cap on one RAS answer; a larger one fails the nccl_ras collector, naming this flag"),
        Option("state-dir", parse_optional_path,
               "directory of the GPU health history kept across daemon restarts and reboots (the same XID "
               'again after a reboot or a GPU reset asks for service); "" keeps it in memory only'),
        Option("web-max-requests", parse_positive_int,
               "HTTP requests served at once in each lane (scrapes with verified credentials, or /metrics "
               "without basic auth; everything else); beyond it 503 at once"),
        Option("web-header-timeout", parse_seconds,
               "seconds a connection has to send its request headers (from connecting, or its first byte "
               "after a keep-alive pause) before it is closed"),
        Option("log-level", parse_log_level, "debug, info, warning or error"),
        Option("profile", parse_profile,
               "full serves every family; fleet only those the shipped alerts, rules and Fleet dashboard read"),
    )


# The flags `check` and `demo` use (`serve` takes every option); `demo` has its own defaults.
CHECK_FLAGS = frozenset({"collectors", "procfs", "sysfs", "devfs", "nvme-devices", "infiniband-devices",
                         "gpu-processes", "ingest-socket", "kubelet-pod-resources-socket",
                         "kubelet-pod-resources-refresh", "hpc-job-mapping-dir", "fs-mounts", "gpfs-mmpmon", "kmsg",
                         "state-dir", "log-level", "nccl-inspector-dir", "nccl-inspector-json-dir", "nccl-ras-addr",
                         "nccl-ras-allow-remote", "nccl-ras-max-bytes"})
DEMO_FLAGS = frozenset({"listen", "interval", "collectors", "gpu-processes", "web-config", "log-level"})
DEMO_DEFAULTS = {"interval": "1"}  # GPM needs two samples: SM activity shows after one interval


def command_options(command: str, available_collectors: Sequence[str]) -> tuple[Option, ...]:
    """The `Settings` options of one subcommand: `serve` takes all, `check` and `demo` only those they use.

    `demo`'s own flags (`--incident`) make its `Plan`, not `Settings`: see `trainmon.demo.options`.
    """
    options = serve_options(available_collectors)
    if command == "check":
        return tuple(o for o in options if o.flag in CHECK_FLAGS)
    if command == "demo":
        return tuple(replace(o, own_default=DEMO_DEFAULTS.get(o.flag)) for o in options if o.flag in DEMO_FLAGS)
    return options


SD_LISTEN_FDS_START = 3  # sd_listen_fds(3): the first passed descriptor


def systemd_socket_fd(env: Mapping[str, str], pid: int) -> int | None:
    """The ingest socket systemd passed through socket activation (LISTEN_PID, LISTEN_FDS), if any."""
    if env.get("LISTEN_PID") != str(pid) or not env.get("LISTEN_FDS", "").isdigit():
        return None
    return SD_LISTEN_FDS_START if int(env["LISTEN_FDS"]) >= 1 else None


def settings_from(values: Mapping[str, str], options: Sequence[Option], **overrides: object) -> Settings:
    """Build `Settings` from the raw text of each option (flag, environment or default).

    Raises:
        ConfigError: the first value that does not parse, or a combination that is refused.
    """
    # Any: each option's parser makes the type of its own field.
    parsed: dict[str, Any] = {opt.field_name: opt.parse(opt.flag, values.get(opt.field_name, opt.default))
                              for opt in options}
    parsed.update(overrides)
    settings = Settings(**parsed)
    flagged = tuple(name for field_name, name in FLAG_COLLECTORS.items()
                    if getattr(settings, field_name) is not None and name not in settings.collectors)
    if flagged:
        settings = replace(settings, collectors=settings.collectors + flagged)
    udp = settings.ingest_udp
    if udp is not None and not udp.is_loopback and not settings.ingest_udp_allow_remote:
        raise ConfigError("ingest-udp", str(udp),
                          "a non-loopback address accepts datagrams from the network; "
                          "add --ingest-udp-allow-remote to mean it")
    ras = settings.nccl_ras_addr
    if not ras.is_loopback and not settings.nccl_ras_allow_remote:
        raise ConfigError("nccl-ras-addr", str(ras),
                          "RAS answers for the whole job to anyone who connects; a non-loopback address "
                          "needs --nccl-ras-allow-remote to mean it")
    return settings
