"""Node dashboard: each GPU, NVMe namespace, file-system mount and InfiniBand port of the selected nodes, and the
daemon itself."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel

from bundle import links
from trainmon.catalog import aer, daemon, fs, gpu, hpc_jobs, infiniband, nvme, pod_resources, recorded

from .config import DashboardConfig
from .panels import Board, Query, Variable, graph, linked, single

NODE = 'job=~"$job", instance=~"$instance"'  # after the selector (DashboardConfig.matchers)
GPU = "{{instance}} gpu {{gpu}}"
DEV = "{{instance}} {{device}}"
PORT = "{{instance}} {{device}}:{{port}}"
MOUNT = "{{instance}} {{mount}}"
RATE = "[$__rate_interval]"


def job_variable(config: DashboardConfig) -> Variable:
    """The Job variable: the scrape jobs of the targets `config.selector` picks; every query matches it."""
    return Variable(name="job", label="Job", query=f"label_values({daemon.BUILD_INFO}{{{config.selector}}}, job)")


INSTANCE = Variable(name="instance", label="Instance",
                    query=f'label_values({daemon.BUILD_INFO}{{job=~"$job"}}, instance)')


def _gpu(b: Board) -> Board:
    node_matchers = b.config.matchers(NODE)
    return b.row(
        "GPU",
        single("GPUs up", "GPUs whose last NVML read succeeded.", "none",
               Query(f"sum({gpu.GPU_UP}{{{node_matchers}}})", "up")),
        single(
            "GPUs expected",
            "NVIDIA GPUs on the PCI bus; more than GPUs up means a GPU is lost.",
            "none",
            Query(f"sum({gpu.GPUS_EXPECTED}{{{node_matchers}}})", "expected"),
        ),
        single(
            "Mean SM activity",
            "SM activity averaged over the selected GPUs (GPM).",
            "percentunit",
            Query(f"avg({gpu.GPU_SM_UTILIZATION_RATIO}{{{node_matchers}}})", "SM"),
        ),
        single(
            "Power",
            "Total power draw of the selected GPUs.",
            "watt",
            Query(f"sum({gpu.GPU_POWER_WATTS}{{{node_matchers}}})", "power"),
        ),
        single(
            "Framebuffer used",
            "Framebuffer used over total, all selected GPUs.",
            "percentunit",
            Query(f"sum({gpu.GPU_FB_USED_BYTES}{{{node_matchers}}})"
                  f" / sum({gpu.GPU_FB_TOTAL_BYTES}{{{node_matchers}}})", "used"),
        ),
        single(
            "Uncorrectable ECC errors",
            "Volatile uncorrectable ECC errors since the driver loaded, all selected GPUs.",
            "none",
            Query(f'sum({gpu.GPU_ECC_ERRORS_TOTAL}{{{node_matchers}, error="uncorrected"}})', "uncorrected"),
        ),
        graph(
            "SM activity",
            "Share of SMs busy (NVML GPM, Hopper and later). This is the real work signal: it stays low in an "
            "NCCL hang, unlike the coarse utilization.",
            "percentunit",
            Query(f"{gpu.GPU_SM_UTILIZATION_RATIO}{{{node_matchers}}}", GPU),
            max_value=1,
        ),
        graph(
            "Coarse utilization",
            "NVML utilization.gpu: share of time any kernel ran. Reads 100% while a kernel spins waiting for peers.",
            "percentunit",
            Query(f"{gpu.GPU_UTILIZATION_RATIO}{{{node_matchers}}}", GPU),
            max_value=1,
        ),
        graph(
            "Tensor and DRAM activity",
            "Tensor-core and DRAM bandwidth activity (GPM).",
            "percentunit",
            Query(f"{gpu.GPU_TENSOR_ACTIVE_RATIO}{{{node_matchers}}}", GPU + " tensor"),
            Query(f"{gpu.GPU_DRAM_ACTIVE_RATIO}{{{node_matchers}}}", GPU + " dram"),
            max_value=1,
        ),
        graph(
            "Framebuffer used",
            "Framebuffer in use (excluding reserved). PyTorch's caching allocator keeps this near full by design; "
            "see the training dashboard's allocator retries for real memory pressure.",
            "bytes",
            Query(f"{gpu.GPU_FB_USED_BYTES}{{{node_matchers}}}", GPU),
        ),
        graph(
            "Power",
            "Power draw and the enforced power limit.",
            "watt",
            Query(f"{gpu.GPU_POWER_WATTS}{{{node_matchers}}}", GPU),
            Query(f"{gpu.GPU_POWER_LIMIT_WATTS}{{{node_matchers}}}", GPU + " limit"),
        ),
        graph(
            "Temperature",
            "GPU die and memory temperature.",
            "celsius",
            Query(f"{gpu.GPU_TEMPERATURE_CELSIUS}{{{node_matchers}}}", GPU + " {{sensor}}"),
        ),
        graph(
            "Clocks",
            "SM and memory clocks; SM clocks below their usual value while busy mean throttling.",
            "hertz",
            Query(f"{gpu.GPU_CLOCK_HERTZ}{{{node_matchers}}}", GPU + " {{clock}}"),
        ),
        linked(links.TIME_THROTTLED, graph(
            "Time throttled",
            "Share of time each throttle reason held the clocks down (NVML violation counters, so short events "
            "between samples count).",
            "percentunit",
            Query(f"rate({gpu.GPU_THROTTLE_SECONDS_TOTAL}{{{node_matchers}}}{RATE})", GPU + " {{reason}}"),
        )),
        linked(links.ECC_ERRORS_AND_REMAPPED_ROWS, graph(
            "ECC errors and remapped rows",
            "Volatile ECC error counts and remapped rows. Uncorrectable errors or a remap failure: drain the node.",
            "none",
            Query(f"{gpu.GPU_ECC_ERRORS_TOTAL}{{{node_matchers}}}", GPU + " ECC {{error}}"),
            Query(f"{gpu.GPU_REMAPPED_ROWS_TOTAL}{{{node_matchers}}}", GPU + " remapped {{error}}"),
        )),
        linked(links.XID_ERRORS, graph(
            "XID errors",
            "XID events reported by the driver in each interval, by XID (48, 62, 64, 74, 79, 95, 119, 120 need an "
            "operator).",
            "none",
            Query(f"increase({gpu.GPU_XID_ERRORS_TOTAL}{{{node_matchers}}}{RATE})", GPU + " xid {{xid}}"),
        )),
        linked(links.PCIE_LINK_WIDTH, graph(
            "PCIe link width",
            "Lanes of each GPU's PCIe link now and at most; current under max is a degraded link (reseat or "
            "replace the riser). Idle GPUs lower their generation, not their width.",
            "none",
            Query(f'{gpu.GPU_PCIE_LINK_WIDTH}{{{node_matchers}, kind="current"}}', GPU + " current"),
            Query(f'{gpu.GPU_PCIE_LINK_WIDTH}{{{node_matchers}, kind="max"}}', GPU + " max"),
        )),
    )


def _health(b: Board) -> Board:
    node_matchers = b.config.matchers(NODE)
    return b.row(
        "Health",
        linked(links.HEALTH_VERDICT_PER_GPU, graph(
            "Health verdict per GPU",
            f"The strongest action each GPU needs now ({gpu.GPU_HEALTH_ACTION}; none is not drawn): "
            f"restart_app, reset_gpu, reboot, drain. {gpu.GPU_HEALTH_REASON_INFO} says why.",
            "none",
            Query(f'max by (instance, gpu, action) ({gpu.GPU_HEALTH_ACTION}{{{node_matchers}, action!="none"}})',
                  GPU + ": {{action}}"),
        )),
        graph(
            "XIDs with their mnemonic",
            "XID events per GPU since boot (a step is a new event), with NVIDIA's mnemonic and the action its "
            f"catalog asks for ({recorded.XID_CATALOG_INFO}, recorded once for the fleet by the trainmon rules).",
            "none",
            Query(f"{gpu.GPU_XID_ERRORS_TOTAL}{{{node_matchers}}} "
                  f"* on (xid) group_left (mnemonic, action) {recorded.XID_CATALOG_INFO}",
                  GPU + ": XID {{xid}} {{mnemonic}} ({{action}})"),
        ),
        linked(links.NVLINK_ERRORS_PER_LINK, graph(
            "NVLink errors per link",
            "CRC, replay and recovery errors per second on each NVLink link, and links that are down.",
            "cps",
            Query(f"rate({gpu.GPU_NVLINK_ERRORS_TOTAL}{{{node_matchers}}}{RATE})",
                  GPU + " link {{link}} {{error}}"),
            Query(f"{gpu.GPU_NVLINK_LINK_UP}{{{node_matchers}}} == 0", GPU + " link {{link}} down"),
        )),
        linked(links.PCIE_AER_ERRORS, graph(
            "PCIe AER errors",
            "AER errors per second on the GPUs, HCAs and NVMe controllers, by severity and error (an error "
            "never counted has no series).",
            "cps",
            Query(f"rate({aer.PCIE_AER_ERRORS_TOTAL}{{{node_matchers}}}{RATE})",
                  "{{instance}} {{device}} {{severity}} {{error}}"),
        )),
    )


def _nvme(b: Board) -> Board:
    node_matchers = b.config.matchers(NODE)
    return b.row(
        "NVMe",
        graph(
            "NVMe throughput",
            "Bytes read and written per second, per namespace.",
            "binBps",
            Query(f"rate({nvme.NVME_READ_BYTES_TOTAL}{{{node_matchers}}}{RATE})", DEV + " read"),
            Query(f"rate({nvme.NVME_WRITTEN_BYTES_TOTAL}{{{node_matchers}}}{RATE})", DEV + " write"),
            width=8,
        ),
        linked(links.NVME_LATENCY, graph(
            "NVMe latency",
            "Mean time per completed read and write request.",
            "s",
            Query(
                f"rate({nvme.NVME_READ_TIME_SECONDS_TOTAL}{{{node_matchers}}}{RATE})"
                f" / rate({nvme.NVME_READS_COMPLETED_TOTAL}{{{node_matchers}}}{RATE})",
                DEV + " read",
            ),
            Query(
                f"rate({nvme.NVME_WRITE_TIME_SECONDS_TOTAL}{{{node_matchers}}}{RATE})"
                f" / rate({nvme.NVME_WRITES_COMPLETED_TOTAL}{{{node_matchers}}}{RATE})",
                DEV + " write",
            ),
            width=8,
        )),
        graph(
            "NVMe requests and queue",
            "Completed requests per second and requests in flight.",
            "iops",
            Query(f"rate({nvme.NVME_READS_COMPLETED_TOTAL}{{{node_matchers}}}{RATE})", DEV + " reads"),
            Query(f"rate({nvme.NVME_WRITES_COMPLETED_TOTAL}{{{node_matchers}}}{RATE})", DEV + " writes"),
            Query(f"{nvme.NVME_IO_IN_PROGRESS}{{{node_matchers}}}", DEV + " in flight"),
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
            Query(f"rate({fs.FS_OPERATIONS_TOTAL}{{{node_matchers}}}{RATE})", MOUNT + " {{op}}"),
            Query(f"instance_mount:trainmon_fs_metadata_operations:rate5m{{{node_matchers}}}", MOUNT + " metadata"),
            width=8,
        ),
        linked(links.FILE_SYSTEM_RPC_LATENCY, graph(
            "File-system RPC latency",
            "Mean time per RPC to the servers, and the mount's baseline: its best 5 minutes of the last hour "
            "(TrainmonStorageSlow).",
            "s",
            Query(f"instance_mount:trainmon_fs_rpc_seconds:mean5m{{{node_matchers}}}", MOUNT + " 5m"),
            Query(f"instance_mount:trainmon_fs_rpc_seconds:mean5m_min1h{{{node_matchers}}}", MOUNT + " baseline"),
            width=8,
        )),
        graph(
            "File-system RPC timeouts and in flight",
            "RPCs timed out per second (NFS major timeouts, Lustre OSC imports) and RPCs in flight now (Lustre).",
            "short",
            Query(f"instance_mount:trainmon_fs_rpc_timeouts:rate5m{{{node_matchers}}}", MOUNT + " timeouts/s"),
            Query(f"{fs.FS_RPCS_IN_FLIGHT}{{{node_matchers}}}", MOUNT + " in flight"),
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
            Query(f"rate({infiniband.INFINIBAND_PORT_DATA_RECEIVED_BYTES_TOTAL}{{{node_matchers}}}{RATE})",
                  PORT + " rx"),
            Query(f"rate({infiniband.INFINIBAND_PORT_DATA_TRANSMITTED_BYTES_TOTAL}{{{node_matchers}}}{RATE})",
                  PORT + " tx"),
            width=8,
        ),
        linked(links.INFINIBAND_ERRORS, graph(
            "InfiniBand errors",
            "Symbol errors, receive errors, link-down events and transmit waits per second. Rising errors point at "
            "a cable or transceiver.",
            "cps",
            Query(f"rate({infiniband.INFINIBAND_SYMBOL_ERROR_TOTAL}{{{node_matchers}}}{RATE})", PORT + " symbol"),
            Query(f"rate({infiniband.INFINIBAND_PORT_ERRORS_RECEIVED_TOTAL}{{{node_matchers}}}{RATE})", PORT + " rcv"),
            Query(f"rate({infiniband.INFINIBAND_LINK_DOWNED_TOTAL}{{{node_matchers}}}{RATE})", PORT + " link downed"),
            Query(f"rate({infiniband.INFINIBAND_PORT_TRANSMIT_WAIT_TOTAL}{{{node_matchers}}}{RATE})",
                  PORT + " xmit wait"),
            width=8,
        )),
        linked(links.INFINIBAND_LINK_STATE, graph(
            "InfiniBand link state",
            "Logical port state (4 = ACTIVE, 1 = DOWN) and physical state (5 = LinkUp, 2 = Polling).",
            "none",
            Query(f"{infiniband.INFINIBAND_STATE_ID}{{{node_matchers}}}", PORT + " state"),
            Query(f"{infiniband.INFINIBAND_PHYSICAL_STATE_ID}{{{node_matchers}}}", PORT + " physical"),
            width=8,
        )),
    )


def _exporter(b: Board) -> Board:
    node_matchers = b.config.matchers(NODE)
    return b.row(
        "Exporter",
        linked(links.SCRAPE_HEALTH, graph(
            "Scrape health",
            "Prometheus' scrape result (1 = up) and the success of each trainmon collector.",
            "none",
            Query(f"up{{{node_matchers}}}", "{{instance}} scrape"),
            Query(f"{daemon.COLLECTOR_SUCCESS}{{{node_matchers}}}", "{{instance}} {{collector}}"),
            width=8,
        )),
        graph(
            "Collector duration",
            "Time each collector's last run took.",
            "s",
            Query(f"{daemon.COLLECTOR_DURATION_SECONDS}{{{node_matchers}}}", "{{instance}} {{collector}}"),
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
    up = f"on (instance, uuid) group_left () {gpu.GPU_UP}{{{node_matchers}}}"
    return b.row(
        "GPU owners",
        linked(links.KUBERNETES_OWNERS, graph(
            "Kubernetes owner of each GPU",
            f"The pod and container the kubelet allocated each GPU to ({pod_resources.GPU_ALLOCATION_INFO}; needs the "
            "pod-resources overlay). 1 while the GPU is up, 0 while it is down.",
            "none",
            Query("group by (instance, gpu, uuid, namespace, pod, container) "
                  f"({pod_resources.GPU_ALLOCATION_INFO}{{{node_matchers}}}) * {up}",
                  GPU + ": {{namespace}}/{{pod}} {{container}}"),
        )),
        graph(
            "Slurm job of each GPU",
            f"The Slurm job each GPU runs ({hpc_jobs.GPU_JOB_INFO}: the prolog's mapping directory, else the cgroup "
            "of its processes). 1 while the GPU is up, 0 while it is down.",
            "none",
            Query(f"group by (instance, gpu, uuid, job_id) ({hpc_jobs.GPU_JOB_INFO}{{{node_matchers}}}) * {up}",
                  GPU + ": job {{job_id}}"),
        ),
    )


def build(config: DashboardConfig) -> DashboardModel:
    board = Board(
        config=config,
        identity=links.NODE,
        title="Node",
        description="GPUs, NVMe, network file systems, InfiniBand and the trainmon daemon of the selected nodes.",
        variables=(job_variable(config), INSTANCE),
    )
    return _exporter(_infiniband(_storage(_nvme(_owners(_health(_gpu(board))))))).build()
