"""The collective patches in this process, on a one-rank gloo group: what stays patched, and when."""

from __future__ import annotations

import ast
import bisect
import json
import logging
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import yaml
from torch.distributed import c10d_logger
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.distributed_c10d import _coalescing_manager

from tests.prometheus.rulefiles import run_promtool_tests
from tests.torch.collective_job import SIDE_CALLS
from tests.torch.jobs import run_job
from tests.torch.render_wrapper import RENDERED, all_reduce
from tests.torch.test_monitor import ListTransport
from trainmon import wire
from trainmon.hook.state import Identity, RankState
from trainmon.torch import TrainingMonitor
from trainmon.torch._collectives import CollectiveRecorder
from trainmon.torch._discovery import _signature, op_of
from trainmon.torch._wrapper import wrapper_source


@pytest.fixture
def gloo(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_work_wait_is_patched_only_while_an_async_collective_may_be_pending(gloo: None) -> None:
    """Every blocking collective waits on its own `Work`: from the step end with nothing pending, that wait
    is torch's."""
    torch_wait, transport = dist.Work.wait, ListTransport()
    mon = TrainingMonitor(job_id="unit", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "60"})
    tensor = torch.ones(4)
    seen = []

    mon.step_begin()
    dist.all_reduce(tensor)
    seen.append(dist.Work.wait is torch_wait)
    work = dist.all_reduce(tensor, async_op=True)
    seen.append(dist.Work.wait is torch_wait)
    work.wait()
    dist.broadcast(tensor, src=0)
    seen.append(dist.Work.wait is torch_wait)  # ours until the step ends
    mon.step_end()
    seen.append(dist.Work.wait is torch_wait)
    dist.all_reduce(tensor, async_op=True).wait()  # patched again, and this one is counted too
    mon.close()
    seen.append(dist.Work.wait is torch_wait)
    bye = wire.decode(transport.sent[-1])

    assert [True, False, False, True, True] == seen
    assert {("all_reduce", 3), ("broadcast", 1)} == {(c.op, c.calls) for c in bye.collectives}
    assert [(s.issued, s.completed) for s in bye.group_seqs] == [(4, 4)]


def test_groups_are_found_when_settled_and_before_torch_destroys_them(tmp_path: Path) -> None:
    """The wrapper records the group as torch got it; its numbers are found later, so a group this rank is
    not a member of counts nothing, and the default group's calls still count when it is destroyed first."""
    transport = ListTransport()
    mon = TrainingMonitor(job_id="unit", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "60"})
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    dist.broadcast(tensor, src=0, async_op=True).wait()
    with pytest.warns(UserWarning, match="does not belong to the given group"):  # torch's: nothing is communicated
        dist.all_reduce(tensor, group=dist.GroupMember.NON_GROUP_MEMBER)
    assert mon.state.open and not mon.state.group_seqs  # nothing looked up yet
    dist.destroy_process_group()
    mon.close()
    bye = wire.decode(transport.sent[-1])

    assert [(s.group, s.issued, s.completed) for s in bye.group_seqs] == [("default_pg", 2, 2)]
    assert {("all_reduce", 1, 16), ("broadcast", 1, 16)} == {(c.op, c.calls, c.bytes) for c in bye.collectives}
    assert bye.hook_errors.get("collective", 0) == 0 and not mon.state.open and not mon.state.inflight


def test_a_failing_collective_is_logged_by_torch_as_without_the_hook(gloo: None) -> None:
    """The wrapper calls past torch's exception-logging frame; a call that raises still reaches torch's c10d
    logger with the same record, raises the same error from the same place, and is no longer in flight."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign,assignment]
    c10d_logger._c10d_logger.addHandler(handler)

    def fail() -> tuple[Exception, tuple[str, int, str, str]]:
        with pytest.raises(TypeError) as raised:
            dist.all_reduce("not a tensor")  # type: ignore[arg-type]
        record = records.pop()
        return raised.value, (record.getMessage(), record.lineno, record.funcName, record.filename)

    try:
        error, logged = fail()
        transport = ListTransport()
        mon = TrainingMonitor(job_id="unit", transport=transport, env={"TRAINMON_REPORT_INTERVAL": "60"})
        hooked_error, hooked_logged = fail()
        mon.close()
    finally:
        c10d_logger._c10d_logger.removeHandler(handler)
    bye = wire.decode(transport.sent[-1])

    frames, hooked_frames = (traceback.extract_tb(e.__traceback__) for e in (error, hooked_error))
    assert "'func_name': 'all_reduce'" in logged[0] and hooked_logged == logged and not records
    assert str(hooked_error) == str(error) and hooked_error.__context__ is None
    assert (hooked_frames[-1].name, hooked_frames[-1].lineno) == (frames[-1].name, frames[-1].lineno)
    assert any(f.filename == c10d_logger.__file__ for f in frames)
    assert not any(f.filename == c10d_logger.__file__ for f in hooked_frames)  # one frame fewer per call
    assert [(s.issued, s.completed) for s in bye.group_seqs] == [(1, 1)] and not bye.inflight


def test_wrappers_take_each_functions_own_parameters_and_forward_them_as_given(gloo: None) -> None:
    """A wrapper is made with its function's parameters, or `*args, **kwargs` where the function has others
    or one named like a name the wrapper uses; either way torch's function gets what the caller gave."""
    seen: list[tuple[object, ...]] = []

    def all_reduce(tensor: object, op: object = "sum", group: object = None, async_op: bool = False) -> None:
        seen.append((tensor, op, group, async_op))

    def broadcast(tensor: object, group: object = None, **options: object) -> None:
        seen.append((tensor, group, options))

    def all_gather(entry: object, tensor: object, group: object = None) -> None:  # `entry`: the wrapper's
        seen.append((entry, tensor, group))

    state = RankState()
    recorder = CollectiveRecorder(state, spans=None)
    functions = (all_reduce, broadcast, all_gather)
    sources = [wrapper_source(f, _signature(f, op_of(f.__name__) or "other"))[0] for f in functions]
    reduce, cast, gather = (recorder._wrap(f, _signature(f, op_of(f.__name__) or "other")) for f in functions)
    one, two = torch.ones(2), torch.ones(4)
    reduce(one)
    reduce(one, "max", async_op=True)
    reduce(tensor=two, group=None)
    cast(two, None, src=3)
    gather("e", tensor=one)
    gather("e", two, None)
    report = state.report(Identity(job_id="j", rank=0, pid=1, start_time=0.0), seq=1)

    assert ["*args" not in sources[0], "*args" in sources[1], "*args" in sources[2]] == [True, True, True]
    assert seen == [(one, "sum", None, False), (one, "max", None, True), (two, "sum", None, False),
                    (two, None, {"src": 3}), ("e", one, None), ("e", two, None)]
    assert {(c.op, c.calls, c.bytes) for c in report.collectives} == {
        ("all_reduce", 3, 8 + 8 + 16), ("broadcast", 1, 16), ("all_gather", 2, 8 + 16)}
    assert recorder.errors == 0 and [(s.issued, s.completed) for s in report.group_seqs] == [(6, 6)]


@pytest.mark.serial
def test_a_healthy_job_with_overlapped_grad_sync_never_reads_as_hung(gloo: None, tmp_path: Path) -> None:
    """Megatron with `overlap_grad_reduce`: buckets all-reduced in async coalescing managers, waited through
    `cm.wait()`, and a param all-gather whose manager is dropped unwaited. 40 steps played as 10 minutes
    (one report per step, 15 s apart): the hook's reported series, given to promtool for both ranks of a
    2-rank job, never fire `TrainmonCollectiveHang`, and every call is counted."""
    steps, step_seconds = 40, 15
    mon = TrainingMonitor(job_id="unit", transport=ListTransport(), env={"TRAINMON_REPORT_INTERVAL": "60"})
    grads, shard = [torch.ones(64), torch.ones(32)], torch.ones(16)
    started: list[float] = []
    issued: list[int] = []
    oldest: list[int | None] = []  # simulated age of each report's oldest in-flight collective, in whole steps
    for step in range(steps):
        started.append(time.perf_counter())
        mon.step_begin()
        with _coalescing_manager(async_ops=True) as cm:
            for grad in grads:
                dist.all_reduce(grad, async_op=True)
        cm.wait()
        with _coalescing_manager(async_ops=True):  # nobody waits on this one
            dist.all_gather_single(torch.empty(16), shard, async_op=True)
        mon.step_end()
        report, now = mon.report(), time.perf_counter()
        assert report.sent_at is not None
        issued.append(sum(g.issued for g in report.group_seqs))
        # Each one's issue time on our clock: its age as the report states it (both ends Unix time, read
        # in the same report) back from now.
        ages = [(step - bisect.bisect_right(started, now - (report.sent_at - f.since)) + 2) * step_seconds
                for f in report.inflight]
        oldest.append(max(ages, default=None))
    # The last step's dropped all-gather is settled once gloo's worker completes it: a bounded time, not
    # necessarily before the next report.
    final = mon.report()
    deadline = time.monotonic() + 10
    while {c.op: c.calls for c in final.collectives}.get("all_gather") != steps and time.monotonic() < deadline:
        time.sleep(0.01)
        final = mon.report()
    mon.close()
    alerts = hang_alerts_on(tmp_path, issued, oldest, step_seconds)

    assert steps * step_seconds == 600
    assert max((a for a in oldest if a is not None), default=0) <= 2 * step_seconds, (oldest, final)
    assert "SUCCESS" in alerts, alerts
    assert {("all_reduce", 2 * steps), ("all_gather", steps)} <= {(c.op, c.calls) for c in final.collectives}
    assert [(2 * steps, 2 * steps)] == [(g.issued, g.completed) for g in final.group_seqs]


def test_an_overlapped_bucket_ends_when_its_work_completes_not_when_it_is_waited(gloo: None) -> None:
    """Megatron's overlapped bucket, done while backward still runs, waited on later (`cm.wait()`): its time
    ends where gloo's worker completed it (before: at `cm.wait()`, backward's time included), and the
    blocked part is the wait. Torch's `ProcessGroup` methods come back when the monitor closes."""
    torch_launch = dist.ProcessGroup.allreduce_coalesced
    backward = 0.2
    mon = TrainingMonitor(job_id="unit", transport=ListTransport(), env={"TRAINMON_REPORT_INTERVAL": "60"})
    start = time.perf_counter()
    with _coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(torch.ones(1024), async_op=True)
    cm.works[-1].get_future().wait()  # done, and unseen by the hook: its future, not its `Work`
    time.sleep(backward)
    waited = time.perf_counter()
    cm.wait()
    end = time.perf_counter()
    report = mon.report()
    mon.close()

    (collective,) = report.collectives
    assert ("all_reduce", 1, 4096) == (collective.op, collective.calls, collective.bytes)
    assert 0 < collective.seconds <= end - start - backward / 2, collective
    assert 0 < report.comm_wait <= end - waited
    assert torch_launch is dist.ProcessGroup.allreduce_coalesced


def hang_alerts_on(tmp_path: Path, issued: list[int], oldest: list[int | None], interval: int) -> str:
    """promtool's verdict on "no `TrainmonCollectiveHang` at the end" for a 2-rank job whose ranks both
    report these values, one sample each `interval` seconds."""
    series = []
    for rank in (0, 1):
        labels = f'job="trainmon",job_id="sim",instance="n1:9842",rank="{rank}"'
        info = (f'{labels},local_rank="{rank}",world_size="2",uuid="GPU-{rank}",backend="gloo",framework="megatron",'
                f'loss_scaler="none",pid="{100 + rank}"')
        series += [
            {"series": f"trainmon_train_rank_info{{{info}}}", "values": " ".join("1" for _ in issued)},
            {"series": f'trainmon_nccl_group_size{{{labels},group="default_pg"}}',
             "values": " ".join("2" for _ in issued)},
            {"series": f'trainmon_nccl_issued_total{{{labels},group="default_pg"}}',
             "values": " ".join(map(str, issued))},
            {"series": f'trainmon_nccl_inflight_oldest_seconds{{{labels},group="default_pg",op="all_reduce"}}',
             "values": " ".join("_" if age is None else str(age) for age in oldest)},
        ]
    quiet_at_the_end = {"eval_time": f"{interval * (len(issued) - 1)}s", "alertname": "TrainmonCollectiveHang",
                        "exp_alerts": []}
    test = {"evaluation_interval": f"{interval}s",
            "tests": [{"interval": f"{interval}s", "input_series": series, "alert_rule_test": [quiet_at_the_end]}]}
    path = tmp_path / "hang.test.yml"
    path.write_text(yaml.safe_dump(test))
    result = run_promtool_tests(path, tmp_path)
    return result.stdout + result.stderr


@pytest.mark.slow  # two real ranks
def test_every_collective_of_a_side_thread_is_counted_while_ddp_runs_its_comm_hook(tmp_path: Path) -> None:
    """Two gloo ranks: DDP steps on the training thread, 1,000 all_reduces on another thread and group. The
    comm hook's "don't count twice" is the hook thread's alone, so none of the side thread's is lost (before:
    about one in ten)."""
    run_job("side_thread", 60, tmp_path, env={}, module="tests.torch.collective_job")
    results = [json.loads((tmp_path / f"side_thread-{rank}.json").read_text()) for rank in range(2)]
    (side,) = {group for group in results[0]["groups"] if group.startswith("side")}

    for result in results:
        assert SIDE_CALLS == result["ops"][f"all_reduce/{side}"], result
        assert [SIDE_CALLS, SIDE_CALLS] == result["groups"][side]


def test_a_ddp_built_while_a_monitor_is_live_gets_the_comm_hook(gloo: None) -> None:
    """However it is built (a framework's wrapper): its gradient all-reduce is counted, a hook the user
    registers later runs inside ours, and a DDP built after the monitor closed is torch's own."""
    torch_init = torch.nn.parallel.DistributedDataParallel.__init__
    mon = TrainingMonitor(job_id="unit", transport=ListTransport(), env={"TRAINMON_REPORT_INTERVAL": "60"})
    plain, hooked = (torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2)) for _ in range(2))
    user_hook_calls: list[int] = []

    # No annotations: DDP compares them with its real classes, and this module's are strings.
    def user_hook(state, bucket):  # type: ignore[no-untyped-def]
        user_hook_calls.append(1)
        return default_hooks.allreduce_hook(state, bucket)  # its all_reduce is counted once, as the bucket

    hooked.register_comm_hook(None, user_hook)
    for model in (plain, hooked):
        for _ in range(2):
            model(torch.ones(3, 4)).sum().backward()
    report = mon.report()
    mon.close()
    after = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))

    assert {("all_reduce", 4, 4 * (4 * 2 + 2) * 4)} == {(c.op, c.calls, c.bytes) for c in report.collectives}
    assert [1, 1] == user_hook_calls
    assert torch_init is torch.nn.parallel.DistributedDataParallel.__init__
    assert not after._comm_hooks


def test_the_rendered_wrapper_declares_exactly_the_names_the_recorder_gives_its_wrappers() -> None:
    module = ast.parse(RENDERED.read_text())
    declared = {node.target.id for node in module.body
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
    given = CollectiveRecorder(RankState(), None).wrapper_globals(all_reduce)

    assert set(given) == {name for name in declared if not name.startswith("default_")}
