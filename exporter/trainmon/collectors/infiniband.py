"""InfiniBand and RoCE ports from <sysfs>/class/infiniband/<device>/ports/<port>/.

Names follow node_exporter's `node_infiniband_*` under the `trainmon_infiniband_` prefix, and the
values equal node_exporter's for the same tree. One unreadable attribute drops that one series (and
is listed as skipped in /api/v1/status), never the port or the collector.
"""

from __future__ import annotations

from trainmon.catalog import Family
from trainmon.catalog import infiniband as catalog
from trainmon.collectors.base import Collection, NodeResources
from trainmon.errors import NoData
from trainmon.families import Metric, counter, gauge, info, value_family
from trainmon.gpu_inventory import GpuInventory
from trainmon.ingest.server import IngestServer
from trainmon.roots import Root
from trainmon.settings import Settings
from trainmon.sysfs.infiniband import HwCounter, InfinibandDevice, InfinibandPort, PortCounter, infiniband_class
from trainmon.sysfs.pci_topology import Affinity, Gpu, NicPort, nic_affinity

WORD_BYTES = 4  # port_rcv_data and port_xmit_data count 32-bit words

# counters/<file> -> (family, scale)
PORT_COUNTERS: dict[PortCounter, tuple[Family, int]] = {
    PortCounter.PORT_RCV_DATA: (catalog.INFINIBAND_PORT_DATA_RECEIVED_BYTES_TOTAL, WORD_BYTES),
    PortCounter.PORT_XMIT_DATA: (catalog.INFINIBAND_PORT_DATA_TRANSMITTED_BYTES_TOTAL, WORD_BYTES),
    PortCounter.PORT_RCV_PACKETS: (catalog.INFINIBAND_PORT_PACKETS_RECEIVED_TOTAL, 1),
    PortCounter.PORT_XMIT_PACKETS: (catalog.INFINIBAND_PORT_PACKETS_TRANSMITTED_TOTAL, 1),
    PortCounter.UNICAST_RCV_PACKETS: (catalog.INFINIBAND_UNICAST_PACKETS_RECEIVED_TOTAL, 1),
    PortCounter.UNICAST_XMIT_PACKETS: (catalog.INFINIBAND_UNICAST_PACKETS_TRANSMITTED_TOTAL, 1),
    PortCounter.MULTICAST_RCV_PACKETS: (catalog.INFINIBAND_MULTICAST_PACKETS_RECEIVED_TOTAL, 1),
    PortCounter.MULTICAST_XMIT_PACKETS: (catalog.INFINIBAND_MULTICAST_PACKETS_TRANSMITTED_TOTAL, 1),
    PortCounter.PORT_RCV_ERRORS: (catalog.INFINIBAND_PORT_ERRORS_RECEIVED_TOTAL, 1),
    PortCounter.PORT_XMIT_DISCARDS: (catalog.INFINIBAND_PORT_DISCARDS_TRANSMITTED_TOTAL, 1),
    PortCounter.PORT_RCV_CONSTRAINT_ERRORS: (catalog.INFINIBAND_PORT_CONSTRAINT_ERRORS_RECEIVED_TOTAL, 1),
    PortCounter.PORT_XMIT_CONSTRAINT_ERRORS: (catalog.INFINIBAND_PORT_CONSTRAINT_ERRORS_TRANSMITTED_TOTAL, 1),
    PortCounter.PORT_RCV_REMOTE_PHYSICAL_ERRORS: (catalog.INFINIBAND_PORT_RECEIVE_REMOTE_PHYSICAL_ERRORS_TOTAL, 1),
    PortCounter.PORT_RCV_SWITCH_RELAY_ERRORS: (catalog.INFINIBAND_PORT_RECEIVE_SWITCH_RELAY_ERRORS_TOTAL, 1),
    PortCounter.PORT_XMIT_WAIT: (catalog.INFINIBAND_PORT_TRANSMIT_WAIT_TOTAL, 1),
    PortCounter.SYMBOL_ERROR: (catalog.INFINIBAND_SYMBOL_ERROR_TOTAL, 1),
    PortCounter.LINK_DOWNED: (catalog.INFINIBAND_LINK_DOWNED_TOTAL, 1),
    PortCounter.LINK_ERROR_RECOVERY: (catalog.INFINIBAND_LINK_ERROR_RECOVERY_TOTAL, 1),
    PortCounter.LOCAL_LINK_INTEGRITY_ERRORS: (catalog.INFINIBAND_LOCAL_LINK_INTEGRITY_ERRORS_TOTAL, 1),
    PortCounter.EXCESSIVE_BUFFER_OVERRUN_ERRORS: (catalog.INFINIBAND_EXCESSIVE_BUFFER_OVERRUN_ERRORS_TOTAL, 1),
    PortCounter.VL15_DROPPED: (catalog.INFINIBAND_VL15_DROPPED_TOTAL, 1),
}
# hw_counters/<file> (mlx5) -> family; names as in later node_exporter releases.
HW_COUNTERS: dict[HwCounter, Family] = {
    HwCounter.LIFESPAN: catalog.INFINIBAND_LIFESPAN_SECONDS,
    HwCounter.DUPLICATE_REQUEST: catalog.INFINIBAND_DUPLICATE_REQUESTS_PACKETS_TOTAL,
    HwCounter.IMPLIED_NAK_SEQ_ERR: catalog.INFINIBAND_IMPLIED_NAK_SEQ_ERRORS_TOTAL,
    HwCounter.LOCAL_ACK_TIMEOUT_ERR: catalog.INFINIBAND_LOCAL_ACK_TIMEOUT_ERRORS_TOTAL,
    HwCounter.OUT_OF_BUFFER: catalog.INFINIBAND_OUT_OF_BUFFER_DROPS_TOTAL,
    HwCounter.OUT_OF_SEQUENCE: catalog.INFINIBAND_OUT_OF_SEQUENCE_PACKETS_RECEIVED_TOTAL,
    HwCounter.PACKET_SEQ_ERR: catalog.INFINIBAND_PACKET_SEQUENCE_ERRORS_TOTAL,
    HwCounter.REQ_CQE_ERROR: catalog.INFINIBAND_REQ_CQES_ERRORS_TOTAL,
    HwCounter.REQ_CQE_FLUSH_ERROR: catalog.INFINIBAND_REQ_CQES_FLUSH_ERRORS_TOTAL,
    HwCounter.REQ_REMOTE_ACCESS_ERRORS: catalog.INFINIBAND_REQ_REMOTE_ACCESS_ERRORS_TOTAL,
    HwCounter.REQ_REMOTE_INVALID_REQUEST: catalog.INFINIBAND_REQ_REMOTE_INVALID_REQUEST_ERRORS_TOTAL,
    HwCounter.RESP_CQE_ERROR: catalog.INFINIBAND_RESP_CQES_ERRORS_TOTAL,
    HwCounter.RESP_CQE_FLUSH_ERROR: catalog.INFINIBAND_RESP_CQES_FLUSH_ERRORS_TOTAL,
    HwCounter.RESP_LOCAL_LENGTH_ERROR: catalog.INFINIBAND_RESP_LOCAL_LENGTH_ERRORS_TOTAL,
    HwCounter.RESP_REMOTE_ACCESS_ERRORS: catalog.INFINIBAND_RESP_REMOTE_ACCESS_ERRORS_TOTAL,
    HwCounter.RNR_NAK_RETRY_ERR: catalog.INFINIBAND_RNR_NAK_RETRY_PACKETS_RECEIVED_TOTAL,
    HwCounter.ROCE_ADP_RETRANS: catalog.INFINIBAND_ROCE_ADP_RETRANSMITS_TOTAL,
    HwCounter.ROCE_ADP_RETRANS_TO: catalog.INFINIBAND_ROCE_ADP_RETRANSMITS_TIMEOUT_TOTAL,
    HwCounter.ROCE_SLOW_RESTART: catalog.INFINIBAND_ROCE_SLOW_RESTART_USED_TOTAL,
    HwCounter.ROCE_SLOW_RESTART_CNPS: catalog.INFINIBAND_ROCE_SLOW_RESTART_CNPS_TOTAL,
    HwCounter.ROCE_SLOW_RESTART_TRANS: catalog.INFINIBAND_ROCE_SLOW_RESTART_TOTAL,
    HwCounter.RX_ATOMIC_REQUESTS: catalog.INFINIBAND_RX_ATOMIC_REQUESTS_TOTAL,
    HwCounter.RX_DCT_CONNECT: catalog.INFINIBAND_RX_DCT_CONNECT_REQUESTS_TOTAL,
    HwCounter.RX_READ_REQUESTS: catalog.INFINIBAND_RX_READ_REQUESTS_TOTAL,
    HwCounter.RX_WRITE_REQUESTS: catalog.INFINIBAND_RX_WRITE_REQUESTS_TOTAL,
    HwCounter.RX_ICRC_ENCAPSULATED: catalog.INFINIBAND_RX_ICRC_ENCAPSULATED_ERRORS_TOTAL,
    HwCounter.NP_CNP_SENT: catalog.INFINIBAND_NP_CNP_PACKETS_SENT_TOTAL,
    HwCounter.NP_ECN_MARKED_ROCE_PACKETS: catalog.INFINIBAND_NP_ECN_MARKED_ROCE_PACKETS_RECEIVED_TOTAL,
    HwCounter.RP_CNP_HANDLED: catalog.INFINIBAND_RP_CNP_PACKETS_HANDLED_TOTAL,
    HwCounter.RP_CNP_IGNORED: catalog.INFINIBAND_RP_CNP_IGNORED_PACKETS_RECEIVED_TOTAL,
}


class InfinibandCollector:
    name = "infiniband"

    def __init__(self, settings: Settings, resources: NodeResources) -> None:
        self._sys = Root(settings.sysfs, "sysfs")
        self._include = settings.infiniband_devices
        self._gpus: GpuInventory = resources.gpus
        self._ingest: IngestServer | None = resources.ingest

    def collect(self) -> Collection:
        self._sys.require()
        try:
            devices = infiniband_class(self._sys, self._include)
        except FileNotFoundError as exc:  # anything but an absent class directory means a broken tree
            raise NoData(f"no {exc.filename}") from exc
        if not devices:
            raise NoData(f"no InfiniBand devices under {self._sys.join('class', 'infiniband')}")
        found = [f"{p.device}/{p.port}: {p.state.name if p.state else '?'}, "
                 f"{p.link_layer or '?'}, {p.rate_bytes_per_second or 0} B/s"
                 for d in devices for p in d.ports]
        skipped = [s for d in devices for s in d.skipped_with_ports]
        affinity = self._affinity(devices)
        found += [f"gpu {a.gpu.index} -> {a.nic.device}/{a.nic.port} ({a.path}, {a.candidates} as close)"
                  for a in affinity]
        return Collection(families=(*families(devices), affinity_family(affinity)), found=tuple(found),
                          skipped=tuple(skipped))

    def _affinity(self, devices: list[InfinibandDevice]) -> list[Affinity]:
        """The port NCCL would send each GPU's traffic by; none until the gpu collector has read the GPUs."""
        ib_hca = self._ib_hca()
        gpus = [Gpu(g.index, g.uuid, g.pci_bus_id, ib_hca.get(g.uuid, "")) for g in self._gpus.latest() or ()
                if g.pci_bus_id]
        ports = [NicPort(p.device, p.port) for d in devices for p in d.ports]
        return nic_affinity(self._sys, gpus, ports) if gpus else []

    def _ib_hca(self) -> dict[str, str]:
        """GPU UUID -> the NCCL_IB_HCA the hook reports for the rank on it (lowest rank first)."""
        if self._ingest is None:
            return {}
        ranks = sorted(self._ingest.table.view().ranks, key=lambda s: (s.report.job_id, s.report.rank), reverse=True)
        return {s.report.uuid: s.report.nccl_env["NCCL_IB_HCA"] for s in ranks
                if s.report.uuid and "NCCL_IB_HCA" in s.report.nccl_env}

    def close(self) -> None:
        pass


def families(devices: list[InfinibandDevice]) -> list[Metric]:
    ports = [p for d in devices for p in d.ports]
    return [device_info_family(devices), *port_families(ports), *counter_families(ports)]


def affinity_family(affinity: list[Affinity]) -> Metric:
    family = info(catalog.GPU_NIC_AFFINITY_INFO)
    for a in affinity:
        family.add_metric([str(a.gpu.index), a.gpu.uuid, a.nic.device, a.nic.port, a.path, str(a.candidates),
                           a.gpu.ib_hca], {})
    return family


def device_info_family(devices: list[InfinibandDevice]) -> Metric:
    family = info(catalog.INFINIBAND_INFO)
    for d in devices:
        family.add_metric([d.name, d.board_id or "", d.firmware_version or "", d.hca_type or ""], {})
    return family


def port_families(ports: list[InfinibandPort]) -> list[Metric]:
    port_info = info(catalog.INFINIBAND_PORT_INFO)
    state, phys = gauge(catalog.INFINIBAND_STATE_ID), gauge(catalog.INFINIBAND_PHYSICAL_STATE_ID)
    rate = gauge(catalog.INFINIBAND_RATE_BYTES_PER_SECOND)
    for p in ports:
        key = [p.device, p.port]
        port_info.add_metric([*key, p.link_layer or "", p.state.name if p.state else "",
                              p.physical_state.name if p.physical_state else ""], {})
        for state_family, value in ((state, p.state), (phys, p.physical_state)):
            if value is not None:
                state_family.add_metric(key, value.id)
        if p.rate_bytes_per_second is not None:
            rate.add_metric(key, p.rate_bytes_per_second)
    return [port_info, state, phys, rate]


def counter_families(ports: list[InfinibandPort]) -> list[Metric]:
    out: list[Metric] = []
    for source, (declared, scale) in PORT_COUNTERS.items():
        family = counter(declared)
        for p in ports:
            if source in p.counters:
                family.add_metric([p.device, p.port], p.counters[source] * scale)
        out.append(family)
    for hw_source, hw_declared in HW_COUNTERS.items():
        hw_family = value_family(hw_declared)
        for p in ports:
            if hw_source in p.hw_counters:
                hw_family.add_metric([p.device, p.port], p.hw_counters[hw_source])
        out.append(hw_family)
    return out
