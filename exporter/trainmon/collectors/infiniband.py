"""InfiniBand and RoCE ports from <sysfs>/class/infiniband/<device>/ports/<port>/.

Names follow node_exporter's `node_infiniband_*` under the `trainmon_infiniband_` prefix, and the
values equal node_exporter's for the same tree. One unreadable attribute drops that one series (and
is listed as skipped in /api/v1/status), never the port or the collector.
"""

from __future__ import annotations

from trainmon.collectors.base import Collection, NodeResources
from trainmon.errors import NoData
from trainmon.families import Metric, counter, gauge, info
from trainmon.gpu_inventory import GpuInventory
from trainmon.ingest.server import IngestServer
from trainmon.roots import Root
from trainmon.settings import Settings
from trainmon.sysfs.infiniband import HwCounter, InfinibandDevice, InfinibandPort, PortCounter, infiniband_class
from trainmon.sysfs.pci_topology import Affinity, Gpu, NicPort, nic_affinity

WORD_BYTES = 4  # port_rcv_data and port_xmit_data count 32-bit words
LABELS = ["device", "port"]

# counters/<file> -> (metric suffix, help, scale)
PORT_COUNTERS: dict[PortCounter, tuple[str, str, int]] = {
    PortCounter.PORT_RCV_DATA: ("port_data_received_bytes_total", "Data octets received on all lanes.", WORD_BYTES),
    PortCounter.PORT_XMIT_DATA: ("port_data_transmitted_bytes_total",
                                 "Data octets transmitted on all lanes.", WORD_BYTES),
    PortCounter.PORT_RCV_PACKETS: ("port_packets_received_total", "Packets received.", 1),
    PortCounter.PORT_XMIT_PACKETS: ("port_packets_transmitted_total", "Packets transmitted.", 1),
    PortCounter.UNICAST_RCV_PACKETS: ("unicast_packets_received_total", "Unicast packets received.", 1),
    PortCounter.UNICAST_XMIT_PACKETS: ("unicast_packets_transmitted_total", "Unicast packets transmitted.", 1),
    PortCounter.MULTICAST_RCV_PACKETS: ("multicast_packets_received_total", "Multicast packets received.", 1),
    PortCounter.MULTICAST_XMIT_PACKETS: ("multicast_packets_transmitted_total", "Multicast packets transmitted.", 1),
    PortCounter.PORT_RCV_ERRORS: ("port_errors_received_total", "Packets received with errors.", 1),
    PortCounter.PORT_XMIT_DISCARDS: ("port_discards_transmitted_total",
                                     "Outbound packets discarded (port down or congested).", 1),
    PortCounter.PORT_RCV_CONSTRAINT_ERRORS: ("port_constraint_errors_received_total",
                                             "Packets received and discarded for constraints.", 1),
    PortCounter.PORT_XMIT_CONSTRAINT_ERRORS: ("port_constraint_errors_transmitted_total",
                                              "Packets not transmitted for constraints.", 1),
    PortCounter.PORT_RCV_REMOTE_PHYSICAL_ERRORS: ("port_receive_remote_physical_errors_total",
                                                  "Packets received marked with the EBP delimiter.", 1),
    PortCounter.PORT_RCV_SWITCH_RELAY_ERRORS: ("port_receive_switch_relay_errors_total",
                                               "Packets discarded because they could not be forwarded.", 1),
    PortCounter.PORT_XMIT_WAIT: ("port_transmit_wait_total",
                                 "Ticks with data to send but no flow-control credits (congestion).", 1),
    PortCounter.SYMBOL_ERROR: ("symbol_error_total", "Minor link errors detected on one or more lanes.", 1),
    PortCounter.LINK_DOWNED: ("link_downed_total", "Times the link failed to recover and went down.", 1),
    PortCounter.LINK_ERROR_RECOVERY: ("link_error_recovery_total", "Times the link recovered from an error.", 1),
    PortCounter.LOCAL_LINK_INTEGRITY_ERRORS: ("local_link_integrity_errors_total",
                                              "Times local physical errors exceeded the threshold.", 1),
    PortCounter.EXCESSIVE_BUFFER_OVERRUN_ERRORS: ("excessive_buffer_overrun_errors_total",
                                                  "Times consecutive flow-control update periods had buffer "
                                                  "overruns.", 1),
    PortCounter.VL15_DROPPED: ("vl15_dropped_total", "Incoming VL15 packets dropped for lack of buffers.", 1),
}
# hw_counters/<file> (mlx5) -> (metric suffix, help); names as in later node_exporter releases.
HW_COUNTERS: dict[HwCounter, tuple[str, str]] = {
    HwCounter.LIFESPAN: ("lifespan_seconds", "Maximum period between hw_counters updates."),
    HwCounter.DUPLICATE_REQUEST: ("duplicate_requests_packets_total", "Duplicate requests received."),
    HwCounter.IMPLIED_NAK_SEQ_ERR: ("implied_nak_seq_errors_total", "ACKs with a PSN above the expected one."),
    HwCounter.LOCAL_ACK_TIMEOUT_ERR: ("local_ack_timeout_errors_total", "ACK timer expirations for QPs on the sender."),
    HwCounter.OUT_OF_BUFFER: ("out_of_buffer_drops_total", "Drops for lack of WQEs on the receive queue."),
    HwCounter.OUT_OF_SEQUENCE: ("out_of_sequence_packets_received_total", "Out-of-sequence packets received."),
    HwCounter.PACKET_SEQ_ERR: ("packet_sequence_errors_total", "NAKs with sequence error received."),
    HwCounter.REQ_CQE_ERROR: ("req_cqes_errors_total", "Requester CQEs completed with error."),
    HwCounter.REQ_CQE_FLUSH_ERROR: ("req_cqes_flush_errors_total", "Requester CQEs completed with flushed error."),
    HwCounter.REQ_REMOTE_ACCESS_ERRORS: ("req_remote_access_errors_total", "Remote access errors as requester."),
    HwCounter.REQ_REMOTE_INVALID_REQUEST: ("req_remote_invalid_request_errors_total",
                                           "Remote invalid requests as requester."),
    HwCounter.RESP_CQE_ERROR: ("resp_cqes_errors_total", "Responder CQEs completed with error."),
    HwCounter.RESP_CQE_FLUSH_ERROR: ("resp_cqes_flush_errors_total", "Responder CQEs completed with flushed error."),
    HwCounter.RESP_LOCAL_LENGTH_ERROR: ("resp_local_length_errors_total", "Local length errors as responder."),
    HwCounter.RESP_REMOTE_ACCESS_ERRORS: ("resp_remote_access_errors_total", "Remote access errors as responder."),
    HwCounter.RNR_NAK_RETRY_ERR: ("rnr_nak_retry_packets_received_total", "RNR NAKs received beyond the retry limit."),
    HwCounter.ROCE_ADP_RETRANS: ("roce_adp_retransmits_total", "RoCE adaptive retransmissions."),
    HwCounter.ROCE_ADP_RETRANS_TO: ("roce_adp_retransmits_timeout_total", "RoCE adaptive retransmission timeouts."),
    HwCounter.ROCE_SLOW_RESTART: ("roce_slow_restart_used_total", "Times RoCE slow restart was used."),
    HwCounter.ROCE_SLOW_RESTART_CNPS: ("roce_slow_restart_cnps_total", "CNPs issued by RoCE slow restart."),
    HwCounter.ROCE_SLOW_RESTART_TRANS: ("roce_slow_restart_total", "Times RoCE slow restart changed state to slow."),
    HwCounter.RX_ATOMIC_REQUESTS: ("rx_atomic_requests_total", "Atomic requests received."),
    HwCounter.RX_DCT_CONNECT: ("rx_dct_connect_requests_total", "DCT connect requests received."),
    HwCounter.RX_READ_REQUESTS: ("rx_read_requests_total", "Read requests received."),
    HwCounter.RX_WRITE_REQUESTS: ("rx_write_requests_total", "Write requests received."),
    HwCounter.RX_ICRC_ENCAPSULATED: ("rx_icrc_encapsulated_errors_total", "RoCE packets with ICRC errors."),
    HwCounter.NP_CNP_SENT: ("np_cnp_packets_sent_total", "CNPs sent by the notification point."),
    HwCounter.NP_ECN_MARKED_ROCE_PACKETS: ("np_ecn_marked_roce_packets_received_total",
                                           "ECN-marked RoCE packets received."),
    HwCounter.RP_CNP_HANDLED: ("rp_cnp_packets_handled_total", "CNPs handled by the reaction point."),
    HwCounter.RP_CNP_IGNORED: ("rp_cnp_ignored_packets_received_total",
                               "CNPs received and ignored by the reaction point."),
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
    family = info("gpu_nic_affinity", "The InfiniBand/RoCE port NCCL would pick for a GPU's network traffic (channel "
                  "0), by the PCIe tree in sysfs as NCCL walks it: path PIX (one PCIe switch), PXB (several), PHB "
                  "(through the CPU), SYS (across sockets); candidates, the ports as close (NCCL spreads channels "
                  "over them); nccl_ib_hca, the job's NCCL_IB_HCA (the hook's report) that limited the ports.",
                  ["gpu", "uuid", "device", "port", "path", "candidates", "nccl_ib_hca"])
    for a in affinity:
        family.add_metric([str(a.gpu.index), a.gpu.uuid, a.nic.device, a.nic.port, a.path, str(a.candidates),
                           a.gpu.ib_hca], {})
    return family


def device_info_family(devices: list[InfinibandDevice]) -> Metric:
    family = info("infiniband", "InfiniBand device identity, from sysfs.",
                  ["device", "board_id", "firmware_version", "hca_type"])
    for d in devices:
        family.add_metric([d.name, d.board_id or "", d.firmware_version or "", d.hca_type or ""], {})
    return family


def port_families(ports: list[InfinibandPort]) -> list[Metric]:
    port_info = info("infiniband_port", "Port attributes (link layer: InfiniBand or Ethernet for RoCE).",
                     ["device", "port", "link_layer", "state", "physical_state"])
    state = gauge("infiniband_state_id", "Port state id (1 down, 2 init, 3 armed, 4 active, 5 active defer).", LABELS)
    phys = gauge("infiniband_physical_state_id", "Physical port state id (5 = LinkUp).", LABELS)
    rate = gauge("infiniband_rate_bytes_per_second", "Maximum signal transfer rate of the port.", LABELS)
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
    for source, (suffix, documentation, scale) in PORT_COUNTERS.items():
        family = counter(f"infiniband_{suffix}", f"{documentation} From counters/{source}.", LABELS)
        for p in ports:
            if source in p.counters:
                family.add_metric([p.device, p.port], p.counters[source] * scale)
        out.append(family)
    for hw_source, (suffix, documentation) in HW_COUNTERS.items():
        make = gauge if not suffix.endswith("_total") else counter
        hw_family = make(f"infiniband_{suffix}", f"{documentation} From hw_counters/{hw_source}.", LABELS)
        for p in ports:
            if hw_source in p.hw_counters:
                hw_family.add_metric([p.device, p.port], p.hw_counters[hw_source])
        out.append(hw_family)
    return out
