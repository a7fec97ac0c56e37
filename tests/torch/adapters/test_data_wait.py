"""The Lightning and Hugging Face callbacks count the wait for a slow data loader, in real 2-rank gloo runs.

`tests.torch.adapters.slow_loader_job` plants a sleep in the loader's collate function and times it there:
the reported data wait is that planted time, within 5%, on each rank, with 2 micro-batches per optimizer step
(before: 0 s in both frameworks).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.tools import require_module
from tests.torch.adapters.slow_loader_job import ACCUMULATE, SLOW_S
from tests.torch.jobs import run_job

STEPS = 3
MODULES = {"lightning": "pytorch_lightning", "hf": "transformers"}

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("framework", ["lightning", "hf"])
def test_the_reported_data_wait_is_the_planted_wait(framework: str, tmp_path: Path) -> None:
    require_module(MODULES[framework])
    run_job(framework, STEPS, tmp_path, module="tests.torch.adapters.slow_loader_job",
            env={"TRAINMON_INGEST_SOCKET": str(tmp_path / "absent.sock")})
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"{framework}-{rank}.json").read_text())
        assert seen["steps"] == STEPS, seen
        assert seen["batches"] >= STEPS * ACCUMULATE, seen
        assert seen["planted"] >= seen["batches"] * SLOW_S, seen
        assert 0.95 <= seen["data_wait"] / seen["planted"] <= 1.05, seen
