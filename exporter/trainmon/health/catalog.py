"""NVIDIA's Xid catalog (generated into `xid_catalog`) and what each immediate resolution asks of an operator.

The catalog's resolution buckets are NVIDIA's words; `Action` is trainmon's short list, ordered from the
least to the most disruptive, so the strongest needed action is the maximum.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Action(enum.IntEnum):
    NONE = 0
    RESTART_APP = 1
    RESET_GPU = 2
    REBOOT = 3
    DRAIN = 4  # take the node out of service for inspection or repair

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    xid: int
    mnemonic: str
    description: str
    immediate: str  # NVIDIA's immediate resolution bucket
    investigatory: str


# Every immediate resolution of the published catalog. A bucket not listed here fails the generator,
# so a new catalog cannot ship until someone decides what its new bucket asks for.
IMMEDIATE_ACTION: dict[str, Action] = {
    "": Action.NONE,  # codes the catalog lists without a resolution yet (power smoothing notices, …)
    "IGNORE": Action.NONE,
    "XID_154": Action.NONE,  # "GPU recovery action changed": NVML's recovery-action field carries the action
    "RESTART_APP": Action.RESTART_APP,
    "CHECK_UVM": Action.RESTART_APP,
    "WORKFLOW_XID_45": Action.RESTART_APP,  # preemptive cleanup: follow the XID that caused it
    "RESET_GPU": Action.RESET_GPU,
    "WORKFLOW_XID_48": Action.RESET_GPU,  # double-bit ECC: a reset retires or remaps the row
    "WORKFLOW_NVLINK_ERR": Action.RESET_GPU,
    "WORKFLOW_NVLINK5_ERR": Action.RESET_GPU,
    "RESTART_BM": Action.REBOOT,
    "RESTART_VM": Action.REBOOT,
    "CONTACT_SUPPORT": Action.DRAIN,
    "CHECK_MECHANICALS": Action.DRAIN,
    "UPDATE_SWFW": Action.DRAIN,
}


def action_of(entry: CatalogEntry) -> Action:
    return IMMEDIATE_ACTION[entry.immediate]
