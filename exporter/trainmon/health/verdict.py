"""The verdict per GPU: the strongest action needed now, and the reasons, from one cycle's signals.

`decide` is a pure function of `Signals`; `HealthTracker` keeps what it needs between cycles: the XID
counts each GPU had when it was last seen reset, for escalation (gpud's rule: the same XID again after
the fix it asked for means the fix does not hold, so the GPU needs service).
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
    count: int
    last_seen: float  # Unix time


@dataclass(frozen=True, slots=True, kw_only=True)
class Signals:
    """What one cycle knows about one GPU; None where the driver does not say."""

    xids: tuple[XidSeen, ...] = ()
    counts_at_reset: Mapping[int, int] = field(default_factory=dict)  # XID -> count when last reset
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
        before_reset = signals.counts_at_reset.get(seen.xid, 0)
        since_reset = seen.count - before_reset
        if action == Action.NONE or since_reset <= 0:
            continue
        if action == Action.RESTART_APP:
            if now - seen.last_seen <= RESTART_APP_SECONDS:
                found.append((action, f"{name}: restart the application"))
        elif before_reset > 0:
            found.append((Action.DRAIN, f"{name} again after a GPU reset: service the GPU"))
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


class HealthTracker:
    """Per GPU (by UUID): the XID counts at its last observed reset (a GPU down, then back)."""

    def __init__(self) -> None:
        self._counts_at_reset: dict[str, dict[int, int]] = {}
        self._down: set[str] = set()

    def observe(self, uuid: str, up: bool, xid_counts: Mapping[int, int]) -> Mapping[int, int]:
        """Note this cycle's state of a GPU; the counts at its last reset (empty if never seen reset)."""
        if not up:
            self._down.add(uuid)
        elif uuid in self._down:
            self._down.discard(uuid)
            self._counts_at_reset[uuid] = dict(xid_counts)
        return self._counts_at_reset.get(uuid, {})
