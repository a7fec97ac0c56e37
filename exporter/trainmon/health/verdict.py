"""The verdict per GPU: the strongest action needed now, and the reasons, from one cycle's signals.

`decide` is a pure function of `Signals`; `trainmon.health.history` keeps what it needs between cycles,
daemon restarts and reboots: when each GPU was last reset, and which XIDs came back after the fix they
asked for (gpud's rule: the fix does not hold, so the GPU needs service).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from trainmon.health.catalog import Action, action_of
from trainmon.health.xid_catalog import CATALOG

# An XID that asks for an application restart is "now" for this long after its last occurrence; the
# stronger ones hold until the fix: a GPU reset (seen as the GPU going away and coming back) for
# reset_gpu, the next boot (the kernel log and the daemon start afresh) for reboot and drain.
RESTART_APP_SECONDS = 600.0

# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION values (nvmlGpuRecoveryAction_t, R565+) -> the action and its words.
RECOVERY_ACTIONS: dict[int, tuple[Action, str]] = {
    0: (Action.NONE, "none"),
    1: (Action.RESET_GPU, "GPU_RESET"),
    2: (Action.REBOOT, "NODE_REBOOT"),
    3: (Action.RESET_GPU, "DRAIN_P2P"),
    4: (Action.RESET_GPU, "DRAIN_AND_RESET"),
    5: (Action.REBOOT, "RECOVER_IMEX_DOMAIN"),
    6: (Action.RESET_GPU, "BUS_RESET"),
    7: (Action.REBOOT, "SYSTEM_REBOOT"),
}


@dataclass(frozen=True, slots=True)
class XidSeen:
    xid: int
    last_seen: float  # Unix time


@dataclass(frozen=True, slots=True, kw_only=True)
class Signals:
    """What one cycle knows about one GPU; None where the driver does not say."""

    xids: tuple[XidSeen, ...] = ()
    reset_at: float | None = None  # Unix time trainmon last saw the GPU come back from a reset
    recurred: Mapping[int, str] = field(default_factory=dict)  # XID -> the fix it came back after
    recovery_action: int | None = None
    row_remap_pending: bool = False
    row_remap_failure: bool = False
    uncorrected_ecc: float = 0.0  # volatile: since the driver loaded or the GPU was reset
    lost: bool = False  # GPU_IS_LOST, or gone from NVML's enumeration
    reset_required: bool = False  # NVML answered RESET_REQUIRED


@dataclass(frozen=True, slots=True)
class Verdict:
    action: Action
    reasons: tuple[str, ...]  # runbook words, the strongest first; empty when nothing is needed


def _xid_findings(signals: Signals, now: float) -> list[tuple[Action, str]]:
    found: list[tuple[Action, str]] = []
    for seen in signals.xids:
        entry = CATALOG.get(seen.xid)
        action = action_of(entry) if entry is not None else Action.DRAIN
        name = f"XID {seen.xid} {entry.mnemonic}" if entry is not None else f"XID {seen.xid} (not in the catalog)"
        cleared = signals.reset_at is not None and seen.last_seen <= signals.reset_at
        if action == Action.NONE or cleared:
            continue
        if action == Action.RESTART_APP:
            if now - seen.last_seen <= RESTART_APP_SECONDS:
                found.append((action, f"{name}: restart the application"))
        elif seen.xid in signals.recurred:
            found.append((Action.DRAIN, f"{name} again after {signals.recurred[seen.xid]}: service the GPU"))
        else:
            found.append((action, f"{name}: {_advice(action)}"))
    return found


def _advice(action: Action) -> str:
    return {Action.RESET_GPU: "reset the GPU", Action.REBOOT: "reboot the node",
            Action.DRAIN: "drain the node and service the GPU"}.get(action, "restart the application")


def decide(signals: Signals, now: float) -> Verdict:
    """The strongest action the signals ask for now, and every reason for an action."""
    found = _xid_findings(signals, now)
    if signals.recovery_action is not None and signals.recovery_action != 0:
        action, words = RECOVERY_ACTIONS.get(signals.recovery_action,
                                             (Action.DRAIN, f"unknown value {signals.recovery_action}"))
        found.append((action, f"NVML recovery action {words}: {_advice(action)}"))
    if signals.row_remap_failure:
        found.append((Action.DRAIN, "row remapping failed: service the GPU"))
    if signals.row_remap_pending:
        found.append((Action.RESET_GPU, "row remap pending: reset the GPU to apply it"))
    if signals.uncorrected_ecc > 0:
        found.append((Action.RESET_GPU, "uncorrectable ECC errors since the last reset: reset the GPU"))
    if signals.lost:
        found.append((Action.REBOOT, "GPU lost (fallen off the bus or gone from NVML): reboot the node"))
    elif signals.reset_required:
        found.append((Action.RESET_GPU, "NVML says the GPU needs a reset"))
    if not found:
        return Verdict(Action.NONE, ())
    found.sort(key=lambda f: (-f[0], f[1]))
    return Verdict(found[0][0], tuple(dict.fromkeys(reason for _, reason in found)))

