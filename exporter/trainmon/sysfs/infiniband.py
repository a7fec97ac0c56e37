"""InfiniBand and RoCE devices from <sysfs>/class/infiniband/<device>/ (procfs' `InfiniBandClass`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from trainmon.parsers.infiniband import PortState, parse_counter, parse_rate, parse_state
from trainmon.roots import Root
from trainmon.sysfs.attributes import AttributeReader


class CounterFile(str, Enum):
    """A counter file name; `str()` is the name itself, so it joins into paths as written."""

    def __str__(self) -> str:
        return str(self.value)


class PortCounter(CounterFile):
    """The files of ports/<port>/counters/ that are read; the others there are left alone."""

    PORT_RCV_DATA = "port_rcv_data"  # 4-byte words
    PORT_XMIT_DATA = "port_xmit_data"  # 4-byte words
    PORT_RCV_PACKETS = "port_rcv_packets"
    PORT_XMIT_PACKETS = "port_xmit_packets"
    UNICAST_RCV_PACKETS = "unicast_rcv_packets"
    UNICAST_XMIT_PACKETS = "unicast_xmit_packets"
    MULTICAST_RCV_PACKETS = "multicast_rcv_packets"
    MULTICAST_XMIT_PACKETS = "multicast_xmit_packets"
    PORT_RCV_ERRORS = "port_rcv_errors"
    PORT_XMIT_DISCARDS = "port_xmit_discards"
    PORT_RCV_CONSTRAINT_ERRORS = "port_rcv_constraint_errors"
    PORT_XMIT_CONSTRAINT_ERRORS = "port_xmit_constraint_errors"
    PORT_RCV_REMOTE_PHYSICAL_ERRORS = "port_rcv_remote_physical_errors"
    PORT_RCV_SWITCH_RELAY_ERRORS = "port_rcv_switch_relay_errors"
    PORT_XMIT_WAIT = "port_xmit_wait"
    SYMBOL_ERROR = "symbol_error"
    LINK_DOWNED = "link_downed"
    LINK_ERROR_RECOVERY = "link_error_recovery"
    LOCAL_LINK_INTEGRITY_ERRORS = "local_link_integrity_errors"
    EXCESSIVE_BUFFER_OVERRUN_ERRORS = "excessive_buffer_overrun_errors"
    VL15_DROPPED = "VL15_dropped"


class HwCounter(CounterFile):
    """The files of ports/<port>/hw_counters/ (mlx5) that are read."""

    LIFESPAN = "lifespan"  # milliseconds between updates, not a counter
    DUPLICATE_REQUEST = "duplicate_request"
    IMPLIED_NAK_SEQ_ERR = "implied_nak_seq_err"
    LOCAL_ACK_TIMEOUT_ERR = "local_ack_timeout_err"
    OUT_OF_BUFFER = "out_of_buffer"
    OUT_OF_SEQUENCE = "out_of_sequence"
    PACKET_SEQ_ERR = "packet_seq_err"
    REQ_CQE_ERROR = "req_cqe_error"
    REQ_CQE_FLUSH_ERROR = "req_cqe_flush_error"
    REQ_REMOTE_ACCESS_ERRORS = "req_remote_access_errors"
    REQ_REMOTE_INVALID_REQUEST = "req_remote_invalid_request"
    RESP_CQE_ERROR = "resp_cqe_error"
    RESP_CQE_FLUSH_ERROR = "resp_cqe_flush_error"
    RESP_LOCAL_LENGTH_ERROR = "resp_local_length_error"
    RESP_REMOTE_ACCESS_ERRORS = "resp_remote_access_errors"
    RNR_NAK_RETRY_ERR = "rnr_nak_retry_err"
    ROCE_ADP_RETRANS = "roce_adp_retrans"
    ROCE_ADP_RETRANS_TO = "roce_adp_retrans_to"
    ROCE_SLOW_RESTART = "roce_slow_restart"
    ROCE_SLOW_RESTART_CNPS = "roce_slow_restart_cnps"
    ROCE_SLOW_RESTART_TRANS = "roce_slow_restart_trans"
    RX_ATOMIC_REQUESTS = "rx_atomic_requests"
    RX_DCT_CONNECT = "rx_dct_connect"
    RX_READ_REQUESTS = "rx_read_requests"
    RX_WRITE_REQUESTS = "rx_write_requests"
    RX_ICRC_ENCAPSULATED = "rx_icrc_encapsulated"
    NP_CNP_SENT = "np_cnp_sent"
    NP_ECN_MARKED_ROCE_PACKETS = "np_ecn_marked_roce_packets"
    RP_CNP_HANDLED = "rp_cnp_handled"
    RP_CNP_IGNORED = "rp_cnp_ignored"


C = TypeVar("C", bound=CounterFile)


@dataclass(frozen=True, slots=True, kw_only=True)
class InfinibandPort:
    """One port as read this cycle, in kernel units; `None` or absent where the attribute was unavailable."""

    device: str
    port: str  # ports/<port>
    state: PortState | None  # state: "4: ACTIVE"
    physical_state: PortState | None  # phys_state: "5: LinkUp"
    rate_bytes_per_second: int | None  # rate: "400 Gb/sec (4X NDR)"
    link_layer: str | None  # link_layer: InfiniBand, or Ethernet for RoCE
    counters: Mapping[PortCounter, int]  # counters/<file>
    hw_counters: Mapping[HwCounter, int]  # hw_counters/<file>; mlx5 only
    skipped: tuple[str, ...]  # "<device>/ports/<port>/<attribute>: <why>", in the order read


@dataclass(frozen=True, slots=True, kw_only=True)
class InfinibandDevice:
    name: str
    board_id: str | None  # board_id
    firmware_version: str | None  # fw_ver
    hca_type: str | None  # hca_type; absent on some drivers (hfi1)
    ports: tuple[InfinibandPort, ...]  # lowest number first
    skipped: tuple[str, ...]  # the device's own attributes and its ports directory

    @property
    def skipped_with_ports(self) -> tuple[str, ...]:
        """Every attribute skipped under the device: its ports' first, as they are read."""
        return (*(s for p in self.ports for s in p.skipped), *self.skipped)


def infiniband_class(sys: Root, include: re.Pattern[str] | None = None) -> list[InfinibandDevice]:
    """The devices of <sysfs>/class/infiniband whose names `include` matches, by name.

    Raises:
        FileNotFoundError: the tree has no class/infiniband (a node without the hardware).
        OSError: the class directory is there but cannot be listed (the tree itself is broken).
    """
    class_dir = sys.join("class", "infiniband")
    names = sorted(os.listdir(class_dir))
    return [read_device(f"{class_dir}/{name}", name) for name in names
            if include is None or include.search(name)]


def read_device(path: str, name: str) -> InfinibandDevice:
    reader = AttributeReader(path, name)
    ports = tuple(_read_port(path, name, port) for port in sorted(reader.entries("ports"), key=_numeric))
    return InfinibandDevice(
        name=name,
        board_id=reader.name("board_id"),
        firmware_version=reader.name("fw_ver"),
        hca_type=reader.name("hca_type", optional=True),
        ports=ports,
        skipped=tuple(reader.skipped),
    )


def _read_port(device_path: str, device: str, port: str) -> InfinibandPort:
    reader = AttributeReader(device_path, device)
    base = f"ports/{port}/"
    return InfinibandPort(
        device=device,
        port=port,
        state=reader.parsed(base + "state", parse_state),
        physical_state=reader.parsed(base + "phys_state", parse_state),
        rate_bytes_per_second=reader.parsed(base + "rate", parse_rate),
        link_layer=reader.name(base + "link_layer", optional=True),
        counters=_counters(reader, base + "counters", PortCounter),
        hw_counters=_counters(reader, base + "hw_counters", HwCounter, optional=True),
        skipped=tuple(reader.skipped),
    )


def _counters(reader: AttributeReader, directory: str, known: type[C], optional: bool = False) -> dict[C, int]:
    """The directory's `known` files that parse; the directory's other files are not read."""
    by_name = {member.value: member for member in known}
    values = {}
    for name in reader.entries(directory, optional):
        if name in by_name:
            value = reader.parsed(f"{directory}/{name}", parse_counter)
            if value is not None:
                values[by_name[name]] = value
    return values


def _numeric(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 30, name)
