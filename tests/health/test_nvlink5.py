"""NVLink5 XIDs (144-150): the action their kernel-log fields ask for (the catalog's decode sheet)."""

from __future__ import annotations

import pytest

from trainmon.health.catalog import Action
from trainmon.health.nvlink5 import nvlink5_action, subcode
from trainmon.parsers.kmsg import Nvlink5Detail


@pytest.mark.parametrize(("xid", "detail", "action"), [
    (144, Nvlink5Detail("SAW_MVB", False, 0, 0x1, 0x8), Action.NONE),
    (145, Nvlink5Detail("RLW_RXPIPE", False, 13, 0x0409A0C2, 0x8), Action.NONE),
    (145, Nvlink5Detail("RLW_REMAP", True, 0, 0x4, 0x40), Action.RESET_GPU),
    (149, Nvlink5Detail("NETIR_LINK_EVT", True, 0, 0x025001C6, 0x0), Action.RESET_GPU),  # 37: peer device
    (149, Nvlink5Detail("NETIR_LINK_EVT", True, 0, 0x026001C6, 0x0), Action.NONE),  # 38: software/user
    (149, Nvlink5Detail("NETIR_LINK_EVT", True, 0, 0x028001C6, 0x0), Action.NONE),  # 40: host
    (149, Nvlink5Detail("NETIR", True, -1, 0x026FE406, 0x0), Action.RESET_GPU),  # not a link event
    (150, Nvlink5Detail("MSE_WATCHDOG", True, 0, 0x0, 0x0), Action.RESET_GPU),
])
def test_fatal_asks_for_a_reset_non_fatal_and_ignored_link_events_for_nothing(
        xid: int, detail: Nvlink5Detail, action: Action) -> None:
    assert action == nvlink5_action(xid, detail)


def test_the_subcode_is_interrupt_info_bits_20_to_25() -> None:
    assert (37, 38, 0) == (subcode(0x025001C6), subcode(0x026001C6), subcode(0x000FE406))
