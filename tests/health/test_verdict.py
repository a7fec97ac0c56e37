"""The verdict per GPU from one cycle's signals (pure)."""

from __future__ import annotations

import pytest

from trainmon.health.catalog import Action
from trainmon.health.verdict import RESTART_APP_SECONDS, Signals, Verdict, XidSeen, decide

NOW = 1_800_000_000.0


def test_a_healthy_gpu_needs_nothing() -> None:
    assert Verdict(Action.NONE, ()) == decide(Signals(recovery_action=0), NOW)


def test_application_xids_ask_for_a_restart_only_while_recent() -> None:
    """XID 13 and 31 (catalog: restart the application) are not hardware; 43 (ignore) asks nothing."""
    recent = Signals(xids=(XidSeen(13, NOW - 60), XidSeen(43, NOW - 60)))
    old = Signals(xids=(XidSeen(31, NOW - RESTART_APP_SECONDS - 1),))

    assert Verdict(Action.RESTART_APP, ("XID 13 ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY: "
                                        "restart the application",)) == decide(recent, NOW)
    assert Action.NONE == decide(old, NOW).action


def test_the_strongest_action_wins_and_every_reason_is_listed() -> None:
    signals = Signals(xids=(XidSeen(13, NOW), XidSeen(119, NOW - 86_400), XidSeen(79, NOW - 86_400)),
                      row_remap_pending=True)
    verdict = decide(signals, NOW)

    assert Action.REBOOT == verdict.action
    assert ("XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: reboot the node",
            "XID 119 GSP_RPC_TIMEOUT: reset the GPU",
            "row remap pending: reset the GPU to apply it",
            "XID 13 ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY: restart the application",
            ) == verdict.reasons


@pytest.mark.parametrize(("signals", "action", "words"), [
    (Signals(recovery_action=1), Action.RESET_GPU, "NVML recovery action GPU_RESET: reset the GPU"),
    (Signals(recovery_action=2), Action.REBOOT, "NVML recovery action NODE_REBOOT: reboot the node"),
    (Signals(recovery_action=4), Action.RESET_GPU, "NVML recovery action DRAIN_AND_RESET: reset the GPU"),
    (Signals(recovery_action=99), Action.DRAIN, "NVML recovery action unknown value 99: drain the node and "
                                                "service the GPU"),
    (Signals(row_remap_failure=True), Action.DRAIN, "row remapping failed: service the GPU"),
    (Signals(uncorrected_ecc=2), Action.RESET_GPU, "uncorrectable ECC errors since the last reset: reset the GPU"),
    (Signals(lost=True, reset_required=True), Action.REBOOT, "GPU lost (fallen off the bus or gone from NVML): "
                                                             "reboot the node"),
    (Signals(reset_required=True), Action.RESET_GPU, "NVML says the GPU needs a reset"),
    (Signals(xids=(XidSeen(1000, NOW),)), Action.DRAIN, "XID 1000 (not in the catalog): drain the node and "
                                                           "service the GPU"),
])
def test_each_signal(signals: Signals, action: Action, words: str) -> None:
    assert Verdict(action, (words,)) == decide(signals, NOW)


def test_a_reset_clears_the_xid_it_fixed_and_the_same_xid_again_escalates_to_drain() -> None:
    assert Action.NONE == decide(Signals(xids=(XidSeen(119, NOW - 60),), reset_at=NOW - 30), NOW).action
    again = decide(Signals(xids=(XidSeen(119, NOW),), reset_at=NOW - 30, recurred={119: "a GPU reset"}), NOW)

    assert Verdict(Action.DRAIN, ("XID 119 GSP_RPC_TIMEOUT again after a GPU reset: service the GPU",)) == again
    other = decide(Signals(xids=(XidSeen(119, NOW - 60), XidSeen(62, NOW)), reset_at=NOW - 30), NOW)
    assert Action.RESET_GPU == other.action
