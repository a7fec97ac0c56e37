"""What an NVLink5 XID (144-150, Blackwell) asks for, from the fields its kernel-log line carries.

NVIDIA's catalog gives these codes the immediate resolution WORKFLOW_NVLINK5_ERR: its "XID 144-150
Decode" sheet resolves each line by unit, interrupt info (`intrinfo`) and error status. There, every
Non-fatal row is IGNORE or XID_154_EVAL (the driver then reports a recovery action, which the verdict
reads from NVML's recovery-action field, and may log XID 154), and every Fatal or Link Fatal row is
RESET_GPU except two NETIR_LINK_EVT sub-codes (intrinfo bits 20-25) that are IGNORE. A line without
these fields (an older driver, an NVML event) keeps the catalog's action for the code. The sheet was read
in leptonai/gpud's generated copy of it (components/accelerator/nvidia/xid/catalog_generated.go,
2025-10-29); the driver's Fatal/Nonfatal word is taken to be the sheet's severity column.
"""

from __future__ import annotations

from trainmon.health.catalog import Action
from trainmon.parsers.kmsg import Nvlink5Detail

NETIR_LINK_EVENT_XID = 149
NETIR_LINK_EVENT_UNITS = frozenset({"NETIR_LINK_EVT", "NETIR_LINK_DOWN", "NETIR_LINK_EVT/NETIR_LINK_DOWN"})
# Link-fatal NETIR_LINK_EVT sub-codes the decode sheet resolves as IGNORE (investigate software/user, host).
IGNORED_LINK_EVENT_SUBCODES = frozenset({0b100110, 0b101000})


def subcode(intrinfo: int) -> int:
    """The sub-code NVIDIA's decode sheet keys NETIR_LINK_EVT rows on: interrupt info bits 20-25."""
    return (intrinfo >> 20) & 0x3F


def nvlink5_action(xid: int, detail: Nvlink5Detail) -> Action:
    """RESET_GPU for a fatal NVLink5 error, NONE for a non-fatal one or an ignored link event."""
    if not detail.fatal:
        return Action.NONE
    if (xid == NETIR_LINK_EVENT_XID and detail.unit in NETIR_LINK_EVENT_UNITS
            and subcode(detail.intrinfo) in IGNORED_LINK_EVENT_SUBCODES):
        return Action.NONE
    return Action.RESET_GPU
