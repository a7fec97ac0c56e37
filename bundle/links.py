"""The dashboards, and the panels alerts link to by a stable id.

An alert's `dashboard_url` is `<grafana>/d/<uid>?viewPanel=<id>`. The id of a linked panel is fixed here, and the
dashboard generator gives it that id wherever the panel moves (other panels are numbered around it), so a link
in an alert already sent, or in a bookmark, still opens the same panel after the dashboard changes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Dashboard:
    """A generated dashboard: its name, and the variable an alert's link sets from its label of the same name
    (so the panel opens on the alert's node or training job)."""

    name: str
    link_variable: str | None = None

    @property
    def uid(self) -> str:
        """Stable uid from the name: re-imports replace instead of duplicating."""
        return f"trainmon-{self.name}"


@dataclass(frozen=True, slots=True)
class LinkedPanel:
    """A panel alerts link to: its dashboard and its fixed panel id."""

    dashboard: Dashboard
    id: int


NODE = Dashboard("node", "instance")
TRAINING_JOB = Dashboard("training-job", "job_id")
FLEET = Dashboard("fleet")
DASHBOARDS = (NODE, TRAINING_JOB, FLEET)

# Node dashboard
TIME_THROTTLED = LinkedPanel(NODE, 15)
ECC_ERRORS_AND_REMAPPED_ROWS = LinkedPanel(NODE, 16)
XID_ERRORS = LinkedPanel(NODE, 17)
PCIE_LINK_WIDTH = LinkedPanel(NODE, 18)
HEALTH_VERDICT_PER_GPU = LinkedPanel(NODE, 20)
NVLINK_ERRORS_PER_LINK = LinkedPanel(NODE, 22)
PCIE_AER_ERRORS = LinkedPanel(NODE, 23)
KUBERNETES_OWNERS = LinkedPanel(NODE, 25)
NVME_LATENCY = LinkedPanel(NODE, 29)
FILE_SYSTEM_RPC_LATENCY = LinkedPanel(NODE, 34)
INFINIBAND_ERRORS = LinkedPanel(NODE, 38)
INFINIBAND_LINK_STATE = LinkedPanel(NODE, 39)
SCRAPE_HEALTH = LinkedPanel(NODE, 41)

# Training job dashboard
SAMPLES_PER_SECOND = LinkedPanel(TRAINING_JOB, 8)
STEP_TIME_PER_RANK = LinkedPanel(TRAINING_JOB, 12)
DATA_LOADER_WAIT_SHARE_PER_RANK = LinkedPanel(TRAINING_JOB, 15)
ABSENT_RANKS = LinkedPanel(TRAINING_JOB, 21)
STRAGGLER_SCORE_BY_RANK = LinkedPanel(TRAINING_JOB, 25)
COMPUTE_TIME_PER_STEP_BY_RANK = LinkedPanel(TRAINING_JOB, 26)
COMMUNICATION_WAIT_SHARE_PER_RANK = LinkedPanel(TRAINING_JOB, 30)
COLLECTIVES_BEHIND_THE_GROUP = LinkedPanel(TRAINING_JOB, 35)
NCCL_BUS_BANDWIDTH = LinkedPanel(TRAINING_JOB, 36)
NCCL_RANKS_MISSING = LinkedPanel(TRAINING_JOB, 37)
HUNG_JOB_CLASS_AND_CULPRIT = LinkedPanel(TRAINING_JOB, 38)
LOSS = LinkedPanel(TRAINING_JOB, 40)
LOSS_AND_GRAD_NORM_SPIKES = LinkedPanel(TRAINING_JOB, 43)
LOSS_SCALE = LinkedPanel(TRAINING_JOB, 44)
SKIPPED_AND_NON_FINITE_STEPS = LinkedPanel(TRAINING_JOB, 45)
CHECKPOINT_WRITES = LinkedPanel(TRAINING_JOB, 48)
SM_ACTIVITY_BY_RANK = LinkedPanel(TRAINING_JOB, 50)
ALLOCATOR_RETRIES_AND_OOMS = LinkedPanel(TRAINING_JOB, 54)

# Fleet dashboard
NODES = LinkedPanel(FLEET, 2)
GPUS_LOST = LinkedPanel(FLEET, 4)
FAILING_COLLECTORS = LinkedPanel(FLEET, 26)

LINKED: tuple[LinkedPanel, ...] = (
    TIME_THROTTLED,
    ECC_ERRORS_AND_REMAPPED_ROWS,
    XID_ERRORS,
    PCIE_LINK_WIDTH,
    HEALTH_VERDICT_PER_GPU,
    NVLINK_ERRORS_PER_LINK,
    PCIE_AER_ERRORS,
    KUBERNETES_OWNERS,
    NVME_LATENCY,
    FILE_SYSTEM_RPC_LATENCY,
    INFINIBAND_ERRORS,
    INFINIBAND_LINK_STATE,
    SCRAPE_HEALTH,
    SAMPLES_PER_SECOND,
    STEP_TIME_PER_RANK,
    DATA_LOADER_WAIT_SHARE_PER_RANK,
    ABSENT_RANKS,
    STRAGGLER_SCORE_BY_RANK,
    COMPUTE_TIME_PER_STEP_BY_RANK,
    COMMUNICATION_WAIT_SHARE_PER_RANK,
    COLLECTIVES_BEHIND_THE_GROUP,
    NCCL_BUS_BANDWIDTH,
    NCCL_RANKS_MISSING,
    HUNG_JOB_CLASS_AND_CULPRIT,
    LOSS,
    LOSS_AND_GRAD_NORM_SPIKES,
    LOSS_SCALE,
    SKIPPED_AND_NON_FINITE_STEPS,
    CHECKPOINT_WRITES,
    SM_ACTIVITY_BY_RANK,
    ALLOCATOR_RETRIES_AND_OOMS,
    NODES,
    GPUS_LOST,
    FAILING_COLLECTORS,
)
