"""Node dashboard: each GPU, NVMe namespace, file-system mount and InfiniBand port of the selected nodes, and the
daemon itself."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel

from .config import DashboardConfig
from .panels import Board, Query, Variable, graph, single

NODE = 'job=~"$job", instance=~"$instance"'  # after the selector (DashboardConfig.matchers)
GPU = "{{instance}} gpu {{gpu}}"
DEV = "{{instance}} {{device}}"
PORT = "{{instance}} {{device}}:{{port}}"
MOUNT = "{{instance}} {{mount}}"
RATE = "[$__rate_interval]"


def job_variable(config: DashboardConfig) -> Variable:
    """The Job variable: the scrape jobs of the targets `config.selector` picks; every query matches it."""
    return Variable(name="job", label="Job", query=f"label_values(trainmon_build_info{{{config.selector}}}, job)")


INSTANCE = Variable(name="instance", label="Instance", query='label_values(trainmon_build_info{job=~"$job"}, instance)')


def _gpu(b: Board) -> Board:
    node_matchers = b.config.matchers(NODE)
    return b.row(
        "GPU",
        single("GPUs up", "GPUs whose last NVML read succeeded.", "none",
               Query(f"sum(trainmon_gpu_up{{{node_matchers}}})", "up")),
        single(
            "GPUs expected",
            "NVIDIA GPUs on the PCI bus; more than GPUs up means a GPU is lost.",
            "none",
            Query(f"sum(trainmon_gpus_expected{{{node_matchers}}})", "expected"),
        ),
        single(
            "Mean SM activity",
            "SM activity averaged over the selected GPUs (GPM).",
            "percentunit",
            Query(f"avg(trainmon_gpu_sm_utilization_ratio{{{node_matchers}}})", "SM"),
        ),
        single(
            "Power",
            "Total power draw of the selected GPUs.",
            "watt",
            Query(f"sum(trainmon_gpu_power_watts{{{node_matchers}}})", "power"),
        ),
        single(
            "Framebuffer used",
            "Framebuffer used over total, all selected GPUs.",
            "percentunit",
            Query(f"sum(trainmon_gpu_fb_used_bytes{{{node_matchers}}})"
                  f" / sum(trainmon_gpu_fb_total_bytes{{{node_matchers}}})", "used"),
        ),
        single(
            "Uncorrectable ECC errors",
            "Volatile uncorrectable ECC errors since the driver loaded, all selected GPUs.",
            "none",
            Query(f'sum(trainmon_gpu_ecc_errors_total{{{node_matchers}, error="uncorrected"}})', "uncorrected"),
        ),
        graph(
            "SM activity",
            "Share of SMs busy (NVML GPM, Hopper and later). This is the real work signal: it stays low in an "
            "NCCL hang, unlike the coarse utilization.",
            "percentunit",
            Query(f"trainmon_gpu_sm_utilization_ratio{{{node_matchers}}}", GPU),
            max_value=1,
        ),
        graph(
            "Coarse utilization",
            "NVML utilization.gpu: share of time any kernel ran. Reads 100% while a kernel spins waiting for peers.",
            "percentunit",
            Query(f"trainmon_gpu_utilization_ratio{{{node_matchers}}}", GPU),
            max_value=1,
        ),
        graph(
            "Tensor and DRAM activity",
            "Tensor-core and DRAM bandwidth activity (GPM).",
            "percentunit",
            Query(f"trainmon_gpu_tensor_active_ratio{{{node_matchers}}}", GPU + " tensor"),
            Query(f"trainmon_gpu_dram_active_ratio{{{node_matchers}}}", GPU + " dram"),
            max_value=1,
        ),
        graph(
            "Framebuffer used",
            "Framebuffer in use (excluding reserved). PyTorch's caching allocator keeps this near full by design; "
            "see the training dashboard's allocator retries for real memory pressure.",
            "bytes",
            Query(f"trainmon_gpu_fb_used_bytes{{{node_matchers}}}", GPU),
        ),
        graph(
            "Power",
            "Power draw and the enforced power limit.",
            "watt",
            Query(f"trainmon_gpu_power_watts{{{node_matchers}}}", GPU),
            Query(f"trainmon_gpu_power_limit_watts{{{node_matchers}}}", GPU + " limit"),
        ),
        graph(
            "Temperature",
            "GPU die and memory temperature.",
            "celsius",
            Query(f"trainmon_gpu_temperature_celsius{{{node_matchers}}}", GPU + " {{sensor}}"),
        ),
        graph(
            "Clocks",
            "SM and memory clocks; SM clocks below their usual value while busy mean throttling.",
            "hertz",
            Query(f"trainmon_gpu_clock_hertz{{{node_matchers}}}", GPU + " {{clock}}"),
        ),
        graph(
            "Time throttled",
            "Share of time each throttle reason held the clocks down (NVML violation counters, so short events "
            "between samples count).",
            "percentunit",
            Query(f"rate(trainmon_gpu_throttle_seconds_total{{{node_matchers}}}{RATE})", GPU + " {{reason}}"),
        ),
        graph(
            "ECC errors and remapped rows",
            "Volatile ECC error counts and remapped rows. Uncorrectable errors or a remap failure: drain the node.",
            "none",
            Query(f"trainmon_gpu_ecc_errors_total{{{node_matchers}}}", GPU + " ECC {{error}}"),
            Query(f"trainmon_gpu_remapped_rows_total{{{node_matchers}}}", GPU + " remapped {{error}}"),
        ),
        graph(
            "XID errors",
            "XID events reported by the driver in each interval, by XID (48, 62, 64, 74, 79, 95, 119, 120 need an "
            "operator).",
            "none",
            Query(f"increase(trainmon_gpu_xid_errors_total{{{node_matchers}}}{RATE})", GPU + " xid {{xid}}"),
        ),
        graph(
            "PCIe link width",
            "Lanes of each GPU's PCIe link now and at most; current under max is a degraded link (reseat or "
            "replace the riser). Idle GPUs lower their generation, not their width.",
            "none",
            Query(f'trainmon_gpu_pcie_link_width{{{node_matchers}, kind="current"}}', GPU + " current"),
            Query(f'trainmon_gpu_pcie_link_width{{{node_matchers}, kind="max"}}', GPU + " max"),
        ),
    )


def _health(b: Board) -> Board:
    node_matchers = b.config.matchers(NODE)
    return b.row(
        "Health",
        graph(
            "Health verdict per GPU",
            "The strongest action each GPU needs now (trainmon_gpu_health_action; none is not drawn): "
            "restart_app, reset_gpu, reboot, drain. trainmon_gpu_health_reason_info says why.",
            "none",
            Query(f'max by (instance, gpu, action) (trainmon_gpu_health_action{{{node_matchers}, action!="none"}})',
                  GPU + ": {{action}}"),
        ),
        graph(
            "XIDs with their mnemonic",
            "XID events per GPU since boot (a step is a new event), with NVIDIA's mnemonic and the action its "
            "catalog asks for (trainmon_xid_catalog_info, recorded once for the fleet by the trainmon rules).",
            "none",
            Query(f"trainmon_gpu_xid_errors_total{{{node_matchers}}} "
                  "* on (xid) group_left (mnemonic, action) trainmon_xid_catalog_info",
                  GPU + ": XID {{xid}} {{mnemonic}} ({{action}})"),
        ),
        graph(
            "NVLink errors per link",
            "CRC, replay and recovery errors per second on each NVLink link, and links that are down.",
            "cps",
            Query(f"rate(trainmon_gpu_nvlink_errors_total{{{node_matchers}}}{RATE})",
                  GPU + " link {{link}} {{error}}"),
            Query(f"trainmon_gpu_nvlink_link_up{{{node_matchers}}} == 0", GPU + " link {{link}} down"),
        ),
        graph(
            "PCIe AER errors",
            "AER errors per second on the GPUs, HCAs and NVMe controllers, by severity and error (an error "
            "never counted has no series).",
            "cps",
            Query(f"rate(trainmon_pcie_aer_errors_total{{{node_matchers}}}{RATE})",
                  "{{instance}} {{device}} {{severity}} {{error}}"),
        ),
    )


def _nvme(b: Board) -> Board:
    node_matchers = b.config.matchers(NODE)
    return b.row(
        "NVMe",
        graph(
            "NVMe throughput",
            "Bytes read and written per second, per namespace.",
            "binBps",
            Query(f"rate(trainmon_nvme_read_bytes_total{{{node_matchers}}}{RATE})", DEV + " read"),
            Query(f"rate(trainmon_nvme_written_bytes_total{{{node_matchers}}}{RATE})", DEV + " write"),
            width=8,
        ),
        graph(
            "NVMe latency",
            "Mean time per completed read and write request.",
            "s",
            Query(
                f"rate(trainmon_nvme_read_time_seconds_total{{{node_matchers}}}{RATE})"
                f" / rate(trainmon_nvme_reads_completed_total{{{node_matchers}}}{RATE})",
                DEV + " read",
            ),
            Query(
                f"rate(trainmon_nvme_write_time_seconds_total{{{node_matchers}}}{RATE})"
                f" / rate(trainmon_nvme_writes_completed_total{{{node_matchers}}}{RATE})",
                DEV + " write",
            ),
            width=8,
        ),
        graph(
            "NVMe requests and queue",
            "Completed requests per second and requests in flight.",
            "iops",
            Query(f"rate(trainmon_nvme_reads_completed_total{{{node_matchers}}}{RATE})", DEV + " reads"),
            Query(f"rate(trainmon_nvme_writes_completed_total{{{node_matchers}}}{RATE})", DEV + " writes"),
            Query(f"trainmon_nvme_io_in_progress{{{node_matchers}}}", DEV + " in flight"),
            width=8,
        ),
    )


def _storage(b: Board) -> Board:
    """Storage tier 3 per mount (recording rules of prometheus/rules.yml, `instance_mount:` series)."""
    node_matchers = b.config.matchers(NODE)
    return b.row(
        "Storage",
        graph(
            "File-system throughput",
            "Bytes applications read and wrote per second, per network or parallel file-system mount.",
            "binBps",
            Query(f"instance_mount:trainmon_fs_read_bytes:rate5m{{{node_matchers}}}", MOUNT + " read"),
            Query(f"instance_mount:trainmon_fs_written_bytes:rate5m{{{node_matchers}}}", MOUNT + " write"),
            width=8,
        ),
        graph(
            "File-system operations",
            "Client operations per second by kind (open, getattr, read, ...): a metadata storm from a "
            "small-file dataset shows as open/getattr/lookup; the metadata series sums all but read and write.",
            "cps",
            Query(f"rate(trainmon_fs_operations_total{{{node_matchers}}}{RATE})", MOUNT + " {{op}}"),
            Query(f"instance_mount:trainmon_fs_metadata_operations:rate5m{{{node_matchers}}}", MOUNT + " metadata"),
            width=8,
        ),
        graph(
            "File-system RPC latency",
            "Mean time per RPC to the servers, and the mount's baseline: its best 5 minutes of the last hour "
            "(TrainmonStorageSlow).",
            "s",
            Query(f"instance_mount:trainmon_fs_rpc_seconds:mean5m{{{node_matchers}}}", MOUNT + " 5m"),
            Query(f"instance_mount:trainmon_fs_rpc_seconds:mean5m_min1h{{{node_matchers}}}", MOUNT + " baseline"),
            width=8,
        ),
        graph(
            "File-system RPC timeouts and in flight",
            "RPCs timed out per second (NFS major timeouts, Lustre OSC imports) and RPCs in flight now (Lustre).",
            "short",
            Query(f"instance_mount:trainmon_fs_rpc_timeouts:rate5m{{{node_matchers}}}", MOUNT + " timeouts/s"),
            Query(f"trainmon_fs_rpcs_in_flight{{{node_matchers}}}", MOUNT + " in flight"),
            width=24,
        ),
    )


def _infiniband(b: Board) -> Board:
    node_matchers = b.config.matchers(NODE)
    return b.row(
        "InfiniBand",
        graph(
            "InfiniBand throughput",
            "Data received and transmitted per port (the port counters count 4-byte words; trainmon reports bytes).",
            "binBps",
            Query(f"rate(trainmon_infiniband_port_data_received_bytes_total{{{node_matchers}}}{RATE})", PORT + " rx"),
            Query(f"rate(trainmon_infiniband_port_data_transmitted_bytes_total{{{node_matchers}}}{RATE})",
                  PORT + " tx"),
            width=8,
        ),
        graph(
            "InfiniBand errors",
            "Symbol errors, receive errors, link-down events and transmit waits per second. Rising errors point at "
            "a cable or transceiver.",
            "cps",
            Query(f"rate(trainmon_infiniband_symbol_error_total{{{node_matchers}}}{RATE})", PORT + " symbol"),
            Query(f"rate(trainmon_infiniband_port_errors_received_total{{{node_matchers}}}{RATE})", PORT + " rcv"),
            Query(f"rate(trainmon_infiniband_link_downed_total{{{node_matchers}}}{RATE})", PORT + " link downed"),
            Query(f"rate(trainmon_infiniband_port_transmit_wait_total{{{node_matchers}}}{RATE})", PORT + " xmit wait"),
            width=8,
        ),
        graph(
            "InfiniBand link state",
            "Logical port state (4 = ACTIVE, 1 = DOWN) and physical state (5 = LinkUp, 2 = Polling).",
            "none",
            Query(f"trainmon_infiniband_state_id{{{node_matchers}}}", PORT + " state"),
            Query(f"trainmon_infiniband_physical_state_id{{{node_matchers}}}", PORT + " physical"),
            width=8,
        ),
    )


def _exporter(b: Board) -> Board:
    node_matchers = b.config.matchers(NODE)
    return b.row(
        "Exporter",
        graph(
            "Scrape health",
            "Prometheus' scrape result (1 = up) and the success of each trainmon collector.",
            "none",
            Query(f"up{{{node_matchers}}}", "{{instance}} scrape"),
            Query(f"trainmon_collector_success{{{node_matchers}}}", "{{instance}} {{collector}}"),
            width=8,
        ),
        graph(
            "Collector duration",
            "Time each collector's last run took.",
            "s",
            Query(f"trainmon_collector_duration_seconds{{{node_matchers}}}", "{{instance}} {{collector}}"),
            width=8,
        ),
        graph(
            "Scrape duration",
            "Time Prometheus took to scrape each daemon.",
            "s",
            Query(f"scrape_duration_seconds{{{node_matchers}}}", "{{instance}}"),
            width=8,
        ),
    )


def _owners(b: Board) -> Board:
    """Who holds each GPU: trainmon_gpu_up (1 up, 0 down) joined onto each owner `_info` series, so that a GPU
    with several owners (containers sharing a DRA claim, time-slicing, two Slurm jobs) shows one line each."""
    node_matchers = b.config.matchers(NODE)
    up = f"on (instance, uuid) group_left () trainmon_gpu_up{{{node_matchers}}}"
    return b.row(
        "GPU owners",
        graph(
            "Kubernetes owner of each GPU",
            "The pod and container the kubelet allocated each GPU to (trainmon_gpu_allocation_info; needs the "
            "pod-resources overlay). 1 while the GPU is up, 0 while it is down.",
            "none",
            Query("group by (instance, gpu, uuid, namespace, pod, container) "
                  f"(trainmon_gpu_allocation_info{{{node_matchers}}}) * {up}",
                  GPU + ": {{namespace}}/{{pod}} {{container}}"),
        ),
        graph(
            "Slurm job of each GPU",
            "The Slurm job each GPU runs (trainmon_gpu_job_info: the prolog's mapping directory, else the cgroup "
            "of its processes). 1 while the GPU is up, 0 while it is down.",
            "none",
            Query(f"group by (instance, gpu, uuid, job_id) (trainmon_gpu_job_info{{{node_matchers}}}) * {up}",
                  GPU + ": job {{job_id}}"),
        ),
    )


def build(config: DashboardConfig) -> DashboardModel:
    board = Board(
        config=config,
        name="node",
        title="Node",
        description="GPUs, NVMe, network file systems, InfiniBand and the trainmon daemon of the selected nodes.",
        variables=(job_variable(config), INSTANCE),
    )
    return _exporter(_infiniband(_storage(_nvme(_owners(_health(_gpu(board))))))).build()
