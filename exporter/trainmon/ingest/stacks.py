"""What a stuck rank's stack says: a short signature to group ranks by, and where the rank is stuck.

The hook sends the training thread's stack innermost frame first, each `file:line:function`. Ranks
stuck at the same place have the same stack, so the same signature: the largest group is the healthy
majority, the others are the outliers (ByteRobust's aggregation). The place is the innermost frame
that says it: `collective` inside torch.distributed (or the hook's wrapper of it), `data` inside data
loading (the hook's `mon.dataloader`, torch's DataLoader, common dataset and storage libraries, `torch.load`),
else `other`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

PLACES = ("collective", "data", "other")
NO_STACK = "unknown"  # the signature of a suspected rank whose stack has not arrived
SIGNATURE_CHARS = 12
COLLECTIVE_MARKS = ("/torch/distributed/", "<trainmon wrapper of ", "/deepspeed/comm/", "/torchcomms/")
DATA_MARKS = ("/torch/utils/data/", "/datasets/", "/webdataset/", "/streaming/", "/nvidia/dali/", "/fsspec/",
              "/s3fs/", "/torch/serialization.py:", "/safetensors/")
DATA_LOOP = ("/trainmon/torch/_monitor.py:", ":_timed")  # the hook's `mon.dataloader`, waiting for a batch


def signature(stack: Sequence[str]) -> str:
    """A short hash of the stack (equal stacks, equal signatures)."""
    return hashlib.sha256("\n".join(stack).encode()).hexdigest()[:SIGNATURE_CHARS]


def place(stack: Sequence[str]) -> str:
    """Where the stack is stuck: one of PLACES, from its innermost frame that says."""
    for frame in stack:
        if any(mark in frame for mark in COLLECTIVE_MARKS):
            return "collective"
        if any(mark in frame for mark in DATA_MARKS) or (DATA_LOOP[0] in frame and frame.endswith(DATA_LOOP[1])):
            return "data"
    return "other"
