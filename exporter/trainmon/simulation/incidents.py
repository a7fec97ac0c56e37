"""The scenarios `trainmon demo --incident NAME` plants, and the shipped alert each one ends in.

Every part of the simulation (the job, the procfs/sysfs tree, the simulated GPUs) asks the same
`Plan` whether its incident is under way, so they turn together after the healthy period.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# incident -> the alert (prometheus/alerts.yml) it ends in
INCIDENTS: dict[str, str] = {
    "straggler": "TrainmonStragglerRank",
    "comm-bound": "TrainmonCommunicationBound",
    "stall": "TrainmonTrainingStalled",
    "gpu-lost": "TrainmonGPULost",
    "ib-down": "TrainmonInfinibandLinkDown",
    "nvme-slow": "TrainmonNVMeLatencyHigh",
    "loss-scale": "TrainmonLossScaleCollapse",
    "hang": "TrainmonCollectiveHang",
    "hang-data": "TrainmonJobHung",
    "hang-collective": "TrainmonJobHung",
    "hang-gone": "TrainmonJobHung",
    "storage-slow": "TrainmonStorageSlow",
    "xid-reset": "TrainmonGPUNeedsReset",
    "loss-spike": "TrainmonLossSpike",
    "slow-gpu": "TrainmonSlowRank",
}
# The hangs, each with rank 2 as its culprit and TrainmonJobHung's class: `hang` stops it before a collective (its
# peers wait in theirs), `hang-data` in its data loader, `hang-collective` inside the all-reduce every rank issued
# (its stack alone differs), `hang-gone` ends its process through an error.
HANGS = {"hang": "host", "hang-data": "data", "hang-collective": "collective", "hang-gone": "gone"}
HUNG_RANK = 2
STRAGGLER_RANK = 5  # healthy: computes 2% slower than its peers, under the 3% TrainmonSlowRank wants
LOST_GPU = 6
RESET_XID_GPU, RESET_XID = 4, 119  # GSP RPC timeout: NVIDIA's catalog says reset the GPU
DOWN_PORT = 3  # the InfiniBand rail (mlx5_3) that goes down
# comm-bound: the fabric slows every all-reduce, and NCCL Inspector's GPU timing singles out the member on the
# worst rail (the rank of GPU 3, whose NIC is mlx5_3): TrainmonNCCLSlowLink names it
SLOW_LINK_RANK, SLOW_LINK_FACTOR = 3, 2.5
SLOW_NAMESPACE = "nvme3n1"
SLOW_MOUNT = "/lustre"  # the Lustre mount whose servers slow down; the job then waits for its data
# The healthy run's checkpoints, in seconds since start: the job enters its phase and the GPUs go quiet
# at the same moments (the phase keeps the idle-GPU and stall alerts quiet). Another period
# (`--checkpoint-every`) scales all three.
CHECKPOINT_FIRST_S, CHECKPOINT_EVERY_S, CHECKPOINT_S = 20.0, 120.0, 8.0


@dataclass(frozen=True)
class Plan:
    """Which incident, if any, and when it starts (seconds after the plan was made); how often the job
    checkpoints."""

    incident: str | None = None
    after: float = 60.0
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    checkpoint_every: float = CHECKPOINT_EVERY_S

    def __post_init__(self) -> None:
        if not self.started:
            object.__setattr__(self, "started", self.clock())

    def active(self, incident: str) -> bool:
        return self.incident == incident and self.clock() - self.started >= self.after

    def hang(self) -> str | None:
        """The hang under way (one of HANGS), if any."""
        return self.incident if self.incident in HANGS and self.active(self.incident) else None

    def checkpointing(self, elapsed: float) -> bool:
        """Whether the job is in its checkpoint phase `elapsed` seconds after it started."""
        since_first = elapsed - CHECKPOINT_FIRST_S * self._scale
        return since_first >= 0 and since_first % self.checkpoint_every < CHECKPOINT_S * self._scale

    def checkpoints_begun(self, elapsed: float) -> int:
        """How many checkpoints have begun `elapsed` seconds after the job started."""
        since_first = elapsed - CHECKPOINT_FIRST_S * self._scale
        return 0 if since_first < 0 else 1 + int(since_first // self.checkpoint_every)

    @property
    def _scale(self) -> float:
        return self.checkpoint_every / CHECKPOINT_EVERY_S
