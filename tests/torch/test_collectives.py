"""The collective patches in this process, on a one-rank gloo group: what stays patched, and when."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.torch.test_monitor import ListTransport
from trainmon import wire
from trainmon.torch import TrainingMonitor


@pytest.fixture
def gloo(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_work_wait_is_patched_only_while_an_async_collective_may_be_pending(gloo: None) -> None:
    """Every blocking collective waits on its own `Work`: with nothing pending, that wait is torch's."""
    torch_wait, transport = dist.Work.wait, ListTransport()
    mon = TrainingMonitor(job_id="unit", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "60"})
    tensor = torch.ones(4)
    seen = []

    dist.all_reduce(tensor)
    seen.append(dist.Work.wait is torch_wait)
    work = dist.all_reduce(tensor, async_op=True)
    seen.append(dist.Work.wait is torch_wait)
    work.wait()
    dist.broadcast(tensor, src=0)
    seen.append(dist.Work.wait is torch_wait)
    dist.all_reduce(tensor, async_op=True).wait()  # patched again, and this one is counted too
    mon.close()
    seen.append(dist.Work.wait is torch_wait)
    bye = wire.decode(transport.sent[-1])

    assert [True, False, True, True] == seen
    assert {("all_reduce", 3), ("broadcast", 1)} == {(c.op, c.calls) for c in bye.collectives}
    assert [(s.issued, s.completed) for s in bye.group_seqs] == [(4, 4)]
