"""Where a stuck rank's stack is, and its signature."""

from __future__ import annotations

import pytest

from trainmon.ingest.stacks import place, signature

TORCH = "/venv/lib/python3.11/site-packages/torch"


@pytest.mark.parametrize(("stack", "where"), [
    ([f"{TORCH}/distributed/distributed_c10d.py:4794:barrier", "/job/train.py:40:step"], "collective"),
    (["/job/train.py:12:slow_op", "<trainmon wrapper of all_reduce>:9:all_reduce", "/job/train.py:40:step"],
     "collective"),
    (["/job/data.py:7:__iter__", "/venv/site-packages/trainmon/torch/_monitor.py:266:_timed", "/job/train.py:38:main"],
     "data"),
    ([f"{TORCH}/utils/data/dataloader.py:1133:_get_data", "/job/train.py:38:main"], "data"),
    (["/job/model.py:90:forward", "/job/train.py:40:step"], "other"),
    ([], "other"),
], ids=["c10d", "wrapper", "mon-dataloader", "torch-dataloader", "compute", "empty"])
def test_the_innermost_frame_that_says_decides_the_place(stack: list[str], where: str) -> None:
    assert where == place(stack)


def test_equal_stacks_share_a_short_signature_and_another_line_does_not() -> None:
    a = ["/job/train.py:40:step", "/job/train.py:88:main"]

    assert signature(a) == signature(list(a)) != signature(["/job/train.py:41:step", "/job/train.py:88:main"])
    assert 12 == len(signature(a))
