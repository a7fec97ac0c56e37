"""The `infiniband` collector: InfiniBand and RoCE ports from sysfs, and the NIC nearest each GPU."""

from __future__ import annotations

from trainmon.catalog.family import Family, Kind

GPU_NIC_AFFINITY_INFO = Family(
    "trainmon_gpu_nic_affinity_info",
    Kind.INFO,
    "The InfiniBand/RoCE port NCCL would pick for a GPU's network traffic (channel 0), by the PCIe tree "
    "in sysfs as NCCL walks it: path PIX (one PCIe switch), PXB (several), PHB (through the CPU), SYS "
    "(across sockets); candidates, the ports as close (NCCL spreads channels over them); nccl_ib_hca, the"
    " job's NCCL_IB_HCA (the hook's report) that limited the ports.",
    ("gpu", "uuid", "device", "port", "path", "candidates", "nccl_ib_hca"),
)
INFINIBAND_INFO = Family(
    "trainmon_infiniband_info",
    Kind.INFO,
    "InfiniBand device identity, from sysfs.",
    ("device", "board_id", "firmware_version", "hca_type"),
)
INFINIBAND_PORT_INFO = Family(
    "trainmon_infiniband_port_info",
    Kind.INFO,
    "Port attributes (link layer: InfiniBand or Ethernet for RoCE).",
    ("device", "port", "link_layer", "state", "physical_state"),
)
INFINIBAND_STATE_ID = Family(
    "trainmon_infiniband_state_id",
    Kind.GAUGE,
    "Port state id (1 down, 2 init, 3 armed, 4 active, 5 active defer).",
    ("device", "port"),
)
INFINIBAND_PHYSICAL_STATE_ID = Family(
    "trainmon_infiniband_physical_state_id",
    Kind.GAUGE,
    "Physical port state id (5 = LinkUp).",
    ("device", "port"),
)
INFINIBAND_RATE_BYTES_PER_SECOND = Family(
    "trainmon_infiniband_rate_bytes_per_second",
    Kind.GAUGE,
    "Maximum signal transfer rate of the port.",
    ("device", "port"),
    unit="bytes_per_second",
)
INFINIBAND_PORT_DATA_RECEIVED_BYTES_TOTAL = Family(
    "trainmon_infiniband_port_data_received_bytes_total",
    Kind.COUNTER,
    "Data octets received on all lanes. From counters/port_rcv_data.",
    ("device", "port"),
    unit="bytes",
)
INFINIBAND_PORT_DATA_TRANSMITTED_BYTES_TOTAL = Family(
    "trainmon_infiniband_port_data_transmitted_bytes_total",
    Kind.COUNTER,
    "Data octets transmitted on all lanes. From counters/port_xmit_data.",
    ("device", "port"),
    unit="bytes",
)
INFINIBAND_PORT_PACKETS_RECEIVED_TOTAL = Family(
    "trainmon_infiniband_port_packets_received_total",
    Kind.COUNTER,
    "Packets received. From counters/port_rcv_packets.",
    ("device", "port"),
)
INFINIBAND_PORT_PACKETS_TRANSMITTED_TOTAL = Family(
    "trainmon_infiniband_port_packets_transmitted_total",
    Kind.COUNTER,
    "Packets transmitted. From counters/port_xmit_packets.",
    ("device", "port"),
)
INFINIBAND_UNICAST_PACKETS_RECEIVED_TOTAL = Family(
    "trainmon_infiniband_unicast_packets_received_total",
    Kind.COUNTER,
    "Unicast packets received. From counters/unicast_rcv_packets.",
    ("device", "port"),
)
INFINIBAND_UNICAST_PACKETS_TRANSMITTED_TOTAL = Family(
    "trainmon_infiniband_unicast_packets_transmitted_total",
    Kind.COUNTER,
    "Unicast packets transmitted. From counters/unicast_xmit_packets.",
    ("device", "port"),
)
INFINIBAND_MULTICAST_PACKETS_RECEIVED_TOTAL = Family(
    "trainmon_infiniband_multicast_packets_received_total",
    Kind.COUNTER,
    "Multicast packets received. From counters/multicast_rcv_packets.",
    ("device", "port"),
)
INFINIBAND_MULTICAST_PACKETS_TRANSMITTED_TOTAL = Family(
    "trainmon_infiniband_multicast_packets_transmitted_total",
    Kind.COUNTER,
    "Multicast packets transmitted. From counters/multicast_xmit_packets.",
    ("device", "port"),
)
INFINIBAND_PORT_ERRORS_RECEIVED_TOTAL = Family(
    "trainmon_infiniband_port_errors_received_total",
    Kind.COUNTER,
    "Packets received with errors. From counters/port_rcv_errors.",
    ("device", "port"),
)
INFINIBAND_PORT_DISCARDS_TRANSMITTED_TOTAL = Family(
    "trainmon_infiniband_port_discards_transmitted_total",
    Kind.COUNTER,
    "Outbound packets discarded (port down or congested). From counters/port_xmit_discards.",
    ("device", "port"),
)
INFINIBAND_PORT_CONSTRAINT_ERRORS_RECEIVED_TOTAL = Family(
    "trainmon_infiniband_port_constraint_errors_received_total",
    Kind.COUNTER,
    "Packets received and discarded for constraints. From counters/port_rcv_constraint_errors.",
    ("device", "port"),
)
INFINIBAND_PORT_CONSTRAINT_ERRORS_TRANSMITTED_TOTAL = Family(
    "trainmon_infiniband_port_constraint_errors_transmitted_total",
    Kind.COUNTER,
    "Packets not transmitted for constraints. From counters/port_xmit_constraint_errors.",
    ("device", "port"),
)
INFINIBAND_PORT_RECEIVE_REMOTE_PHYSICAL_ERRORS_TOTAL = Family(
    "trainmon_infiniband_port_receive_remote_physical_errors_total",
    Kind.COUNTER,
    "Packets received marked with the EBP delimiter. From counters/port_rcv_remote_physical_errors.",
    ("device", "port"),
)
INFINIBAND_PORT_RECEIVE_SWITCH_RELAY_ERRORS_TOTAL = Family(
    "trainmon_infiniband_port_receive_switch_relay_errors_total",
    Kind.COUNTER,
    "Packets discarded because they could not be forwarded. From counters/port_rcv_switch_relay_errors.",
    ("device", "port"),
)
INFINIBAND_PORT_TRANSMIT_WAIT_TOTAL = Family(
    "trainmon_infiniband_port_transmit_wait_total",
    Kind.COUNTER,
    "Ticks with data to send but no flow-control credits (congestion). From counters/port_xmit_wait.",
    ("device", "port"),
)
INFINIBAND_SYMBOL_ERROR_TOTAL = Family(
    "trainmon_infiniband_symbol_error_total",
    Kind.COUNTER,
    "Minor link errors detected on one or more lanes. From counters/symbol_error.",
    ("device", "port"),
)
INFINIBAND_LINK_DOWNED_TOTAL = Family(
    "trainmon_infiniband_link_downed_total",
    Kind.COUNTER,
    "Times the link failed to recover and went down. From counters/link_downed.",
    ("device", "port"),
)
INFINIBAND_LINK_ERROR_RECOVERY_TOTAL = Family(
    "trainmon_infiniband_link_error_recovery_total",
    Kind.COUNTER,
    "Times the link recovered from an error. From counters/link_error_recovery.",
    ("device", "port"),
)
INFINIBAND_LOCAL_LINK_INTEGRITY_ERRORS_TOTAL = Family(
    "trainmon_infiniband_local_link_integrity_errors_total",
    Kind.COUNTER,
    "Times local physical errors exceeded the threshold. From counters/local_link_integrity_errors.",
    ("device", "port"),
)
INFINIBAND_EXCESSIVE_BUFFER_OVERRUN_ERRORS_TOTAL = Family(
    "trainmon_infiniband_excessive_buffer_overrun_errors_total",
    Kind.COUNTER,
    "Times consecutive flow-control update periods had buffer overruns. From "
    "counters/excessive_buffer_overrun_errors.",
    ("device", "port"),
)
INFINIBAND_VL15_DROPPED_TOTAL = Family(
    "trainmon_infiniband_vl15_dropped_total",
    Kind.COUNTER,
    "Incoming VL15 packets dropped for lack of buffers. From counters/VL15_dropped.",
    ("device", "port"),
)
INFINIBAND_LIFESPAN_SECONDS = Family(
    "trainmon_infiniband_lifespan_seconds",
    Kind.GAUGE,
    "Maximum period between hw_counters updates. From hw_counters/lifespan.",
    ("device", "port"),
    unit="seconds",
)
INFINIBAND_DUPLICATE_REQUESTS_PACKETS_TOTAL = Family(
    "trainmon_infiniband_duplicate_requests_packets_total",
    Kind.COUNTER,
    "Duplicate requests received. From hw_counters/duplicate_request.",
    ("device", "port"),
)
INFINIBAND_IMPLIED_NAK_SEQ_ERRORS_TOTAL = Family(
    "trainmon_infiniband_implied_nak_seq_errors_total",
    Kind.COUNTER,
    "ACKs with a PSN above the expected one. From hw_counters/implied_nak_seq_err.",
    ("device", "port"),
)
INFINIBAND_LOCAL_ACK_TIMEOUT_ERRORS_TOTAL = Family(
    "trainmon_infiniband_local_ack_timeout_errors_total",
    Kind.COUNTER,
    "ACK timer expirations for QPs on the sender. From hw_counters/local_ack_timeout_err.",
    ("device", "port"),
)
INFINIBAND_OUT_OF_BUFFER_DROPS_TOTAL = Family(
    "trainmon_infiniband_out_of_buffer_drops_total",
    Kind.COUNTER,
    "Drops for lack of WQEs on the receive queue. From hw_counters/out_of_buffer.",
    ("device", "port"),
)
INFINIBAND_OUT_OF_SEQUENCE_PACKETS_RECEIVED_TOTAL = Family(
    "trainmon_infiniband_out_of_sequence_packets_received_total",
    Kind.COUNTER,
    "Out-of-sequence packets received. From hw_counters/out_of_sequence.",
    ("device", "port"),
)
INFINIBAND_PACKET_SEQUENCE_ERRORS_TOTAL = Family(
    "trainmon_infiniband_packet_sequence_errors_total",
    Kind.COUNTER,
    "NAKs with sequence error received. From hw_counters/packet_seq_err.",
    ("device", "port"),
)
INFINIBAND_REQ_CQES_ERRORS_TOTAL = Family(
    "trainmon_infiniband_req_cqes_errors_total",
    Kind.COUNTER,
    "Requester CQEs completed with error. From hw_counters/req_cqe_error.",
    ("device", "port"),
)
INFINIBAND_REQ_CQES_FLUSH_ERRORS_TOTAL = Family(
    "trainmon_infiniband_req_cqes_flush_errors_total",
    Kind.COUNTER,
    "Requester CQEs completed with flushed error. From hw_counters/req_cqe_flush_error.",
    ("device", "port"),
)
INFINIBAND_REQ_REMOTE_ACCESS_ERRORS_TOTAL = Family(
    "trainmon_infiniband_req_remote_access_errors_total",
    Kind.COUNTER,
    "Remote access errors as requester. From hw_counters/req_remote_access_errors.",
    ("device", "port"),
)
INFINIBAND_REQ_REMOTE_INVALID_REQUEST_ERRORS_TOTAL = Family(
    "trainmon_infiniband_req_remote_invalid_request_errors_total",
    Kind.COUNTER,
    "Remote invalid requests as requester. From hw_counters/req_remote_invalid_request.",
    ("device", "port"),
)
INFINIBAND_RESP_CQES_ERRORS_TOTAL = Family(
    "trainmon_infiniband_resp_cqes_errors_total",
    Kind.COUNTER,
    "Responder CQEs completed with error. From hw_counters/resp_cqe_error.",
    ("device", "port"),
)
INFINIBAND_RESP_CQES_FLUSH_ERRORS_TOTAL = Family(
    "trainmon_infiniband_resp_cqes_flush_errors_total",
    Kind.COUNTER,
    "Responder CQEs completed with flushed error. From hw_counters/resp_cqe_flush_error.",
    ("device", "port"),
)
INFINIBAND_RESP_LOCAL_LENGTH_ERRORS_TOTAL = Family(
    "trainmon_infiniband_resp_local_length_errors_total",
    Kind.COUNTER,
    "Local length errors as responder. From hw_counters/resp_local_length_error.",
    ("device", "port"),
)
INFINIBAND_RESP_REMOTE_ACCESS_ERRORS_TOTAL = Family(
    "trainmon_infiniband_resp_remote_access_errors_total",
    Kind.COUNTER,
    "Remote access errors as responder. From hw_counters/resp_remote_access_errors.",
    ("device", "port"),
)
INFINIBAND_RNR_NAK_RETRY_PACKETS_RECEIVED_TOTAL = Family(
    "trainmon_infiniband_rnr_nak_retry_packets_received_total",
    Kind.COUNTER,
    "RNR NAKs received beyond the retry limit. From hw_counters/rnr_nak_retry_err.",
    ("device", "port"),
)
INFINIBAND_ROCE_ADP_RETRANSMITS_TOTAL = Family(
    "trainmon_infiniband_roce_adp_retransmits_total",
    Kind.COUNTER,
    "RoCE adaptive retransmissions. From hw_counters/roce_adp_retrans.",
    ("device", "port"),
)
INFINIBAND_ROCE_ADP_RETRANSMITS_TIMEOUT_TOTAL = Family(
    "trainmon_infiniband_roce_adp_retransmits_timeout_total",
    Kind.COUNTER,
    "RoCE adaptive retransmission timeouts. From hw_counters/roce_adp_retrans_to.",
    ("device", "port"),
)
INFINIBAND_ROCE_SLOW_RESTART_USED_TOTAL = Family(
    "trainmon_infiniband_roce_slow_restart_used_total",
    Kind.COUNTER,
    "Times RoCE slow restart was used. From hw_counters/roce_slow_restart.",
    ("device", "port"),
)
INFINIBAND_ROCE_SLOW_RESTART_CNPS_TOTAL = Family(
    "trainmon_infiniband_roce_slow_restart_cnps_total",
    Kind.COUNTER,
    "CNPs issued by RoCE slow restart. From hw_counters/roce_slow_restart_cnps.",
    ("device", "port"),
)
INFINIBAND_ROCE_SLOW_RESTART_TOTAL = Family(
    "trainmon_infiniband_roce_slow_restart_total",
    Kind.COUNTER,
    "Times RoCE slow restart changed state to slow. From hw_counters/roce_slow_restart_trans.",
    ("device", "port"),
)
INFINIBAND_RX_ATOMIC_REQUESTS_TOTAL = Family(
    "trainmon_infiniband_rx_atomic_requests_total",
    Kind.COUNTER,
    "Atomic requests received. From hw_counters/rx_atomic_requests.",
    ("device", "port"),
)
INFINIBAND_RX_DCT_CONNECT_REQUESTS_TOTAL = Family(
    "trainmon_infiniband_rx_dct_connect_requests_total",
    Kind.COUNTER,
    "DCT connect requests received. From hw_counters/rx_dct_connect.",
    ("device", "port"),
)
INFINIBAND_RX_READ_REQUESTS_TOTAL = Family(
    "trainmon_infiniband_rx_read_requests_total",
    Kind.COUNTER,
    "Read requests received. From hw_counters/rx_read_requests.",
    ("device", "port"),
)
INFINIBAND_RX_WRITE_REQUESTS_TOTAL = Family(
    "trainmon_infiniband_rx_write_requests_total",
    Kind.COUNTER,
    "Write requests received. From hw_counters/rx_write_requests.",
    ("device", "port"),
)
INFINIBAND_RX_ICRC_ENCAPSULATED_ERRORS_TOTAL = Family(
    "trainmon_infiniband_rx_icrc_encapsulated_errors_total",
    Kind.COUNTER,
    "RoCE packets with ICRC errors. From hw_counters/rx_icrc_encapsulated.",
    ("device", "port"),
)
INFINIBAND_NP_CNP_PACKETS_SENT_TOTAL = Family(
    "trainmon_infiniband_np_cnp_packets_sent_total",
    Kind.COUNTER,
    "CNPs sent by the notification point. From hw_counters/np_cnp_sent.",
    ("device", "port"),
)
INFINIBAND_NP_ECN_MARKED_ROCE_PACKETS_RECEIVED_TOTAL = Family(
    "trainmon_infiniband_np_ecn_marked_roce_packets_received_total",
    Kind.COUNTER,
    "ECN-marked RoCE packets received. From hw_counters/np_ecn_marked_roce_packets.",
    ("device", "port"),
)
INFINIBAND_RP_CNP_PACKETS_HANDLED_TOTAL = Family(
    "trainmon_infiniband_rp_cnp_packets_handled_total",
    Kind.COUNTER,
    "CNPs handled by the reaction point. From hw_counters/rp_cnp_handled.",
    ("device", "port"),
)
INFINIBAND_RP_CNP_IGNORED_PACKETS_RECEIVED_TOTAL = Family(
    "trainmon_infiniband_rp_cnp_ignored_packets_received_total",
    Kind.COUNTER,
    "CNPs received and ignored by the reaction point. From hw_counters/rp_cnp_ignored.",
    ("device", "port"),
)

FAMILIES: tuple[Family, ...] = (
    GPU_NIC_AFFINITY_INFO,
    INFINIBAND_INFO,
    INFINIBAND_PORT_INFO,
    INFINIBAND_STATE_ID,
    INFINIBAND_PHYSICAL_STATE_ID,
    INFINIBAND_RATE_BYTES_PER_SECOND,
    INFINIBAND_PORT_DATA_RECEIVED_BYTES_TOTAL,
    INFINIBAND_PORT_DATA_TRANSMITTED_BYTES_TOTAL,
    INFINIBAND_PORT_PACKETS_RECEIVED_TOTAL,
    INFINIBAND_PORT_PACKETS_TRANSMITTED_TOTAL,
    INFINIBAND_UNICAST_PACKETS_RECEIVED_TOTAL,
    INFINIBAND_UNICAST_PACKETS_TRANSMITTED_TOTAL,
    INFINIBAND_MULTICAST_PACKETS_RECEIVED_TOTAL,
    INFINIBAND_MULTICAST_PACKETS_TRANSMITTED_TOTAL,
    INFINIBAND_PORT_ERRORS_RECEIVED_TOTAL,
    INFINIBAND_PORT_DISCARDS_TRANSMITTED_TOTAL,
    INFINIBAND_PORT_CONSTRAINT_ERRORS_RECEIVED_TOTAL,
    INFINIBAND_PORT_CONSTRAINT_ERRORS_TRANSMITTED_TOTAL,
    INFINIBAND_PORT_RECEIVE_REMOTE_PHYSICAL_ERRORS_TOTAL,
    INFINIBAND_PORT_RECEIVE_SWITCH_RELAY_ERRORS_TOTAL,
    INFINIBAND_PORT_TRANSMIT_WAIT_TOTAL,
    INFINIBAND_SYMBOL_ERROR_TOTAL,
    INFINIBAND_LINK_DOWNED_TOTAL,
    INFINIBAND_LINK_ERROR_RECOVERY_TOTAL,
    INFINIBAND_LOCAL_LINK_INTEGRITY_ERRORS_TOTAL,
    INFINIBAND_EXCESSIVE_BUFFER_OVERRUN_ERRORS_TOTAL,
    INFINIBAND_VL15_DROPPED_TOTAL,
    INFINIBAND_LIFESPAN_SECONDS,
    INFINIBAND_DUPLICATE_REQUESTS_PACKETS_TOTAL,
    INFINIBAND_IMPLIED_NAK_SEQ_ERRORS_TOTAL,
    INFINIBAND_LOCAL_ACK_TIMEOUT_ERRORS_TOTAL,
    INFINIBAND_OUT_OF_BUFFER_DROPS_TOTAL,
    INFINIBAND_OUT_OF_SEQUENCE_PACKETS_RECEIVED_TOTAL,
    INFINIBAND_PACKET_SEQUENCE_ERRORS_TOTAL,
    INFINIBAND_REQ_CQES_ERRORS_TOTAL,
    INFINIBAND_REQ_CQES_FLUSH_ERRORS_TOTAL,
    INFINIBAND_REQ_REMOTE_ACCESS_ERRORS_TOTAL,
    INFINIBAND_REQ_REMOTE_INVALID_REQUEST_ERRORS_TOTAL,
    INFINIBAND_RESP_CQES_ERRORS_TOTAL,
    INFINIBAND_RESP_CQES_FLUSH_ERRORS_TOTAL,
    INFINIBAND_RESP_LOCAL_LENGTH_ERRORS_TOTAL,
    INFINIBAND_RESP_REMOTE_ACCESS_ERRORS_TOTAL,
    INFINIBAND_RNR_NAK_RETRY_PACKETS_RECEIVED_TOTAL,
    INFINIBAND_ROCE_ADP_RETRANSMITS_TOTAL,
    INFINIBAND_ROCE_ADP_RETRANSMITS_TIMEOUT_TOTAL,
    INFINIBAND_ROCE_SLOW_RESTART_USED_TOTAL,
    INFINIBAND_ROCE_SLOW_RESTART_CNPS_TOTAL,
    INFINIBAND_ROCE_SLOW_RESTART_TOTAL,
    INFINIBAND_RX_ATOMIC_REQUESTS_TOTAL,
    INFINIBAND_RX_DCT_CONNECT_REQUESTS_TOTAL,
    INFINIBAND_RX_READ_REQUESTS_TOTAL,
    INFINIBAND_RX_WRITE_REQUESTS_TOTAL,
    INFINIBAND_RX_ICRC_ENCAPSULATED_ERRORS_TOTAL,
    INFINIBAND_NP_CNP_PACKETS_SENT_TOTAL,
    INFINIBAND_NP_ECN_MARKED_ROCE_PACKETS_RECEIVED_TOTAL,
    INFINIBAND_RP_CNP_PACKETS_HANDLED_TOTAL,
    INFINIBAND_RP_CNP_IGNORED_PACKETS_RECEIVED_TOTAL,
)
