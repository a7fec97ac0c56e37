"""InfiniBand and RoCE ports from <sysfs>/class/infiniband/<device>/ports/<port>/.

Names follow node_exporter's `node_infiniband_*` under the `trainmon_infiniband_` prefix, and the
values equal node_exporter's for the same tree. One unreadable attribute drops that one series (and
is listed as skipped in /api/v1/status), never the port or the collector.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from trainmon.collectors.base import Collection, NodeResources
from trainmon.errors import NoData
from trainmon.families import Metric, counter, gauge, info
from trainmon.parsers.infiniband import parse_counter, parse_rate, parse_state
from trainmon.roots import Root, Unavailable, list_directory, read_attribute, read_name
from trainmon.settings import Settings

T = TypeVar("T")

WORD_BYTES = 4  # port_rcv_data and port_xmit_data count 32-bit words

# counters/<file> -> (metric suffix, help, scale)
PORT_COUNTERS: dict[str, tuple[str, str, int]] = {
    "port_rcv_data": ("port_data_received_bytes_total", "Data octets received on all lanes.", WORD_BYTES),
    "port_xmit_data": ("port_data_transmitted_bytes_total", "Data octets transmitted on all lanes.", WORD_BYTES),
    "port_rcv_packets": ("port_packets_received_total", "Packets received.", 1),
    "port_xmit_packets": ("port_packets_transmitted_total", "Packets transmitted.", 1),
    "unicast_rcv_packets": ("unicast_packets_received_total", "Unicast packets received.", 1),
    "unicast_xmit_packets": ("unicast_packets_transmitted_total", "Unicast packets transmitted.", 1),
    "multicast_rcv_packets": ("multicast_packets_received_total", "Multicast packets received.", 1),
    "multicast_xmit_packets": ("multicast_packets_transmitted_total", "Multicast packets transmitted.", 1),
    "port_rcv_errors": ("port_errors_received_total", "Packets received with errors.", 1),
    "port_xmit_discards": ("port_discards_transmitted_total",
                           "Outbound packets discarded (port down or congested).", 1),
    "port_rcv_constraint_errors": ("port_constraint_errors_received_total",
                                   "Packets received and discarded for constraints.", 1),
    "port_xmit_constraint_errors": ("port_constraint_errors_transmitted_total",
                                    "Packets not transmitted for constraints.", 1),
    "port_rcv_remote_physical_errors": ("port_receive_remote_physical_errors_total",
                                        "Packets received marked with the EBP delimiter.", 1),
    "port_rcv_switch_relay_errors": ("port_receive_switch_relay_errors_total",
                                     "Packets discarded because they could not be forwarded.", 1),
    "port_xmit_wait": ("port_transmit_wait_total",
                       "Ticks with data to send but no flow-control credits (congestion).", 1),
    "symbol_error": ("symbol_error_total", "Minor link errors detected on one or more lanes.", 1),
    "link_downed": ("link_downed_total", "Times the link failed to recover and went down.", 1),
    "link_error_recovery": ("link_error_recovery_total", "Times the link recovered from an error.", 1),
    "local_link_integrity_errors": ("local_link_integrity_errors_total",
                                    "Times local physical errors exceeded the threshold.", 1),
    "excessive_buffer_overrun_errors": ("excessive_buffer_overrun_errors_total",
                                        "Times consecutive flow-control update periods had buffer overruns.", 1),
    "VL15_dropped": ("vl15_dropped_total", "Incoming VL15 packets dropped for lack of buffers.", 1),
}
# hw_counters/<file> (mlx5) -> (metric suffix, help); names as in later node_exporter releases.
HW_COUNTERS: dict[str, tuple[str, str]] = {
    "lifespan": ("lifespan_seconds", "Maximum period between hw_counters updates."),
    "duplicate_request": ("duplicate_requests_packets_total", "Duplicate requests received."),
    "implied_nak_seq_err": ("implied_nak_seq_errors_total", "ACKs with a PSN above the expected one."),
    "local_ack_timeout_err": ("local_ack_timeout_errors_total", "ACK timer expirations for QPs on the sender."),
    "out_of_buffer": ("out_of_buffer_drops_total", "Drops for lack of WQEs on the receive queue."),
    "out_of_sequence": ("out_of_sequence_packets_received_total", "Out-of-sequence packets received."),
    "packet_seq_err": ("packet_sequence_errors_total", "NAKs with sequence error received."),
    "req_cqe_error": ("req_cqes_errors_total", "Requester CQEs completed with error."),
    "req_cqe_flush_error": ("req_cqes_flush_errors_total", "Requester CQEs completed with flushed error."),
    "req_remote_access_errors": ("req_remote_access_errors_total", "Remote access errors as requester."),
    "req_remote_invalid_request": ("req_remote_invalid_request_errors_total", "Remote invalid requests as requester."),
    "resp_cqe_error": ("resp_cqes_errors_total", "Responder CQEs completed with error."),
    "resp_cqe_flush_error": ("resp_cqes_flush_errors_total", "Responder CQEs completed with flushed error."),
    "resp_local_length_error": ("resp_local_length_errors_total", "Local length errors as responder."),
    "resp_remote_access_errors": ("resp_remote_access_errors_total", "Remote access errors as responder."),
    "rnr_nak_retry_err": ("rnr_nak_retry_packets_received_total", "RNR NAKs received beyond the retry limit."),
    "roce_adp_retrans": ("roce_adp_retransmits_total", "RoCE adaptive retransmissions."),
    "roce_adp_retrans_to": ("roce_adp_retransmits_timeout_total", "RoCE adaptive retransmission timeouts."),
    "roce_slow_restart": ("roce_slow_restart_used_total", "Times RoCE slow restart was used."),
    "roce_slow_restart_cnps": ("roce_slow_restart_cnps_total", "CNPs issued by RoCE slow restart."),
    "roce_slow_restart_trans": ("roce_slow_restart_total", "Times RoCE slow restart changed state to slow."),
    "rx_atomic_requests": ("rx_atomic_requests_total", "Atomic requests received."),
    "rx_dct_connect": ("rx_dct_connect_requests_total", "DCT connect requests received."),
    "rx_read_requests": ("rx_read_requests_total", "Read requests received."),
    "rx_write_requests": ("rx_write_requests_total", "Write requests received."),
    "rx_icrc_encapsulated": ("rx_icrc_encapsulated_errors_total", "RoCE packets with ICRC errors."),
    "np_cnp_sent": ("np_cnp_packets_sent_total", "CNPs sent by the notification point."),
    "np_ecn_marked_roce_packets": ("np_ecn_marked_roce_packets_received_total", "ECN-marked RoCE packets received."),
    "rp_cnp_handled": ("rp_cnp_packets_handled_total", "CNPs handled by the reaction point."),
    "rp_cnp_ignored": ("rp_cnp_ignored_packets_received_total", "CNPs received and ignored by the reaction point."),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PortReading:
    """One port's attributes as read this cycle; None where the attribute was unavailable."""

    device: str
    port: str
    state: tuple[int, str] | None
    physical_state: tuple[int, str] | None
    rate_bytes_per_second: int | None
    link_layer: str | None
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceReading:
    device: str
    board_id: str
    firmware_version: str
    hca_type: str
    ports: tuple[PortReading, ...]


class InfinibandCollector:
    name = "infiniband"

    def __init__(self, settings: Settings, resources: NodeResources) -> None:
        self._sys = Root(settings.sysfs, "sysfs")
        self._class_dir = self._sys.join("class", "infiniband")
        self._include = settings.infiniband_devices

    def collect(self) -> Collection:
        self._sys.require()
        try:  # the class directory is the tree itself: anything but absent means broken
            names = sorted(os.listdir(self._class_dir))
        except FileNotFoundError as exc:
            raise NoData(f"no {self._class_dir}") from exc
        names = [n for n in names if self._include is None or self._include.search(n)]
        if not names:
            raise NoData(f"no InfiniBand devices under {self._class_dir}")
        skipped: list[str] = []
        devices = [DeviceReader(self._class_dir / name, skipped).read() for name in names]
        found = [f"{d.device}/{p.port}: {p.state[1] if p.state else '?'}, "
                 f"{p.link_layer or '?'}, {p.rate_bytes_per_second or 0} B/s"
                 for d in devices for p in d.ports]
        return Collection(families=tuple(families(devices)), found=tuple(found), skipped=tuple(skipped))

    def close(self) -> None:
        pass


class DeviceReader:
    """Reads one device's tree, noting every attribute it had to skip.

    Paths are plain strings joined relative to the device: a cycle reads ~40 files per port, and
    pathlib's object churn was half of the collector's CPU time.
    """

    def __init__(self, path: Path, skipped: list[str]) -> None:
        self._root = f"{path}/"
        self._device = path.name
        self._skipped = skipped

    def read(self) -> DeviceReading:
        ports = tuple(self._port(p) for p in sorted(self._list("ports"), key=_numeric))
        return DeviceReading(
            device=self._device,
            board_id=self._label("board_id") or "",
            firmware_version=self._label("fw_ver") or "",
            hca_type=self._label("hca_type", quiet=True) or "",
            ports=ports,
        )

    def _port(self, port: str) -> PortReading:
        base = f"ports/{port}/"
        return PortReading(
            device=self._device,
            port=port,
            state=self._parsed(base + "state", parse_state),
            physical_state=self._parsed(base + "phys_state", parse_state),
            rate_bytes_per_second=self._parsed(base + "rate", parse_rate),
            link_layer=self._label(base + "link_layer", quiet=True),
            counters=self._counters(base + "counters", PORT_COUNTERS),
            hw_counters=self._counters(base + "hw_counters", HW_COUNTERS, quiet_missing_dir=True),
        )

    def _counters(self, directory: str, known: Mapping[str, object], quiet_missing_dir: bool = False) -> dict[str, int]:
        values = {}
        for name in self._list(directory, quiet=quiet_missing_dir):
            if name in known:
                value = self._parsed(f"{directory}/{name}", parse_counter)
                if value is not None:
                    values[name] = value
        return values

    def _parsed(self, relative: str, parse: Callable[[str], T | None]) -> T | None:
        text = self._attr(relative)
        if text is None:
            return None
        value = parse(text)
        if value is None:
            self._skip(relative, f"unparsable {text[:40]!r}")
        return value

    def _label(self, relative: str, quiet: bool = False) -> str | None:
        return self._attr(relative, quiet, read=read_name)

    def _attr(self, relative: str, quiet: bool = False,
              read: Callable[[str], str | Unavailable] = read_attribute) -> str | None:
        text = read(self._root + relative)
        if isinstance(text, Unavailable):
            self._unavailable(relative, text, quiet)
            return None
        return text

    def _list(self, relative: str, quiet: bool = False) -> list[str]:
        entries = list_directory(self._root + relative)
        if isinstance(entries, Unavailable):
            self._unavailable(relative, entries, quiet)
            return []
        return entries

    def _unavailable(self, relative: str, why: Unavailable, quiet: bool) -> None:
        if not (quiet and why.missing):
            self._skip(relative, why.why)

    def _skip(self, relative: str, why: str) -> None:
        self._skipped.append(f"{self._device}/{relative}: {why}")


def _numeric(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)


def families(devices: list[DeviceReading]) -> list[Metric]:
    labels = ["device", "port"]
    ports = [p for d in devices for p in d.ports]
    device_info = info("infiniband", "InfiniBand device identity, from sysfs.",
                       ["device", "board_id", "firmware_version", "hca_type"])
    for d in devices:
        device_info.add_metric([d.device, d.board_id, d.firmware_version, d.hca_type], {})
    port_info = info("infiniband_port", "Port attributes (link layer: InfiniBand or Ethernet for RoCE).",
                     ["device", "port", "link_layer", "state", "physical_state"])
    state = gauge("infiniband_state_id", "Port state id (1 down, 2 init, 3 armed, 4 active, 5 active defer).", labels)
    phys = gauge("infiniband_physical_state_id", "Physical port state id (5 = LinkUp).", labels)
    rate = gauge("infiniband_rate_bytes_per_second", "Maximum signal transfer rate of the port.", labels)
    for p in ports:
        key = [p.device, p.port]
        port_info.add_metric([*key, p.link_layer or "", p.state[1] if p.state else "",
                              p.physical_state[1] if p.physical_state else ""], {})
        for state_family, value in ((state, p.state), (phys, p.physical_state)):
            if value is not None:
                state_family.add_metric(key, value[0])
        if p.rate_bytes_per_second is not None:
            rate.add_metric(key, p.rate_bytes_per_second)
    out: list[Metric] = [device_info, port_info, state, phys, rate]
    for source, (suffix, documentation, scale) in PORT_COUNTERS.items():
        family = counter(f"infiniband_{suffix}", f"{documentation} From counters/{source}.", labels)
        for p in ports:
            if source in p.counters:
                family.add_metric([p.device, p.port], p.counters[source] * scale)
        out.append(family)
    for source, (suffix, documentation) in HW_COUNTERS.items():
        make = gauge if not suffix.endswith("_total") else counter
        hw_family = make(f"infiniband_{suffix}", f"{documentation} From hw_counters/{source}.", labels)
        for p in ports:
            if source in p.hw_counters:
                hw_family.add_metric([p.device, p.port], p.hw_counters[source])
        out.append(hw_family)
    return out
