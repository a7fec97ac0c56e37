"""Gradient sync seen and timed in real frameworks from PyPI, against `torch.profiler` in the same process.

Each mode of `tests.torch.framework_job` is one 2-rank gloo job (see there). The hook's calls and bytes
of the gradient op equal what the profiler saw; its comm_wait is the training thread's time in the
framework's grad-sync waits (the launch-and-wait at a blocking Megatron coalescing manager's exit, an
async one's `cm.wait()`, timed around the calls); nothing is left in flight.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tools import require_module
from tests.torch.jobs import run_job

STEPS = 6
MEGATRON = ("megatron", "megatron-overlap", "megatron-distopt", "megatron-overlap-distopt")
# The hook's op, and the gloo event the backend runs it as (gloo reduce-scatters with an all-reduce).
GRAD_OPS = {"all_reduce": "gloo:all_reduce", "reduce_scatter": "gloo:all_reduce", "all_gather": "gloo:all_gather"}
# The c10d op each hook op is launched as: the profiler's span of each call, from the op's start on the
# calling thread to the end of its gloo event (`framework_job.backend_spans`), is what the hook can see.
C10D_OPS = {"all_reduce": "c10d::allreduce_coalesced_", "all_gather": "c10d::allgather_into_tensor_coalesced_"}
Result = dict[str, Any]
Run = tuple[str, tuple[Result, Result]]  # the mode and what each rank saw

pytestmark = pytest.mark.slow


def run(mode: str, out: Path) -> tuple[Result, Result]:
    run_job(mode, STEPS, out, env={}, module="tests.torch.framework_job")
    first, second = (json.loads((out / f"{mode}-{rank}.json").read_text()) for rank in (0, 1))
    return first, second


@pytest.fixture(scope="module", params=MEGATRON)
def megatron(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    require_module("megatron.core", quiet=True)
    mode: str = request.param
    return mode, run(mode, tmp_path_factory.mktemp(mode))


def test_megatron_grad_sync_is_counted_as_the_profiler_saw_it(megatron: Run) -> None:
    """One `c10d::*_coalesced_` op per bucket group and step, one call per bucket, the bytes gloo moved."""
    mode, ranks = megatron
    for seen in ranks:
        ops = ("reduce_scatter", "all_gather") if "distopt" in mode else ("all_reduce",)
        assert set(ops) == set(seen["hook"]), seen
        assert sum(seen["c10d"].values()) == len(ops) * seen["bucket_groups"] * STEPS, seen
        for op in ops:
            calls, nbytes, _ = seen["hook"][op]
            assert (seen["buckets"] * STEPS, seen["gloo"][GRAD_OPS[op]][1]) == (calls, nbytes), (op, seen)
        assert (STEPS, 0, "megatron") == (seen["steps"], seen["inflight"], seen["framework"]), seen
        assert (2 * STEPS, 0) == (seen["microbatches"], seen["pipeline_stage"]), seen  # Megatron's own figures
        assert seen["loss"] is not None, seen
        assert seen["grad_norm"] is not None, seen


def test_megatron_grad_sync_wait_is_the_exposed_wait(megatron: Run) -> None:
    """comm_wait is the time the training thread spent in Megatron's grad-sync waits, overlapped or not."""
    _, ranks = megatron
    for seen in ranks:
        assert seen["comm_wait"] > 0, seen
        assert 0.9 <= seen["comm_wait"] / seen["exposed"] <= 1.02, seen


def test_megatron_grad_sync_time_is_the_backends_time(megatron: Run) -> None:
    """Each bucket is timed from its launch to its work's completion as gloo's worker stamps it, not when
    the training thread wakes up or next looks (before: overlapped buckets 47% over gloo's events, the
    distributed optimizer's all-gathers 17-19% over). Per op, summed over the window: never under gloo's
    events; all-reduce and all-gather within 10% of each call's span from launch to gloo's end. Without
    overlap that is within 10% of gloo's events on a quiet machine (1.02-1.03, docs/frameworks.md), but the
    hand-off to gloo's worker thread grows with load (1.13 in a fresh-clone CI run beside three workers), so
    gloo's events bound it from below only. Not bounded above: overlapped buckets against gloo's events (a
    bucket launched in backward waits for a gloo thread to get a core: 2-12% here), and reduce-scatter, whose
    gloo work is a `LambdaWork` without a future: it copies its whole input on the calling thread before its
    all-reduce event and its share out in `wait()`, after the training thread wakes (30-110% over here)."""
    mode, ranks = megatron
    for seen in ranks:
        for op, (_, _, seconds) in seen["hook"].items():
            gloo = seen["gloo"][GRAD_OPS[op]][2]
            assert 0.9 * gloo <= seconds, (op, seen)
            if op in C10D_OPS:
                assert 0.9 <= seconds / seen["spans"][C10D_OPS[op]] <= 1.1, (op, seen)
        if "overlap" not in mode:
            assert sum(seconds for _, _, seconds in seen["hook"].values()) <= 1.02 * seen["exposed"], seen


@pytest.mark.parametrize("mode", ["hf", "accelerate"])
def test_a_ddp_the_framework_builds_gets_the_comm_hook(mode: str, tmp_path: Path) -> None:
    """The HF `Trainer` and Accelerate build the DDP after the monitor exists: its gradient all-reduce is
    counted exactly. (Not counted, as documented: DDP's own C++ broadcasts and param-shape all-gather.)"""
    require_module("transformers" if mode == "hf" else "accelerate", quiet=True)
    for seen in run(mode, tmp_path):
        calls, nbytes, seconds = seen["hook"]["all_reduce"]
        assert "DistributedDataParallel" == seen["wrapped"], seen
        assert (seen["c10d"]["c10d::allreduce_"], seen["gloo"]["gloo:all_reduce"][1]) == (calls, nbytes), seen
        assert calls >= STEPS, seen
        assert seconds > 0, seen
        assert (STEPS, 0) == (seen["steps"], seen["inflight"]), seen
    if mode == "hf":
        assert seen["c10d"]["c10d::allgather_"] - 1 <= seen["hook"]["all_gather"][0], seen
