"""trainmon.integrations.verl against the verl package itself (0.9.1): its `Tracking` class, its
`BaseEngine.train_batch` and its `TrainingWorker`/`ActorRolloutRefWorker` entry points, without Ray
actors or GPUs, and the real daemon serving what they report.

verl's workers are Ray actors built on GPUs, so a worker here is made with `TrainingWorker.__new__`
and given the attributes its `__init__` would set (a CPU engine subclassing verl's `BaseEngine`, its
configs), then its real `train_mini_batch` -> `train_batch` -> `BaseEngine.train_batch` run.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.tools import require_module
from tests.torch.jobs import metrics_when, samples
from trainmon import wire

JOB = "rl-job"
MINI_BATCHES = 3  # per train_mini_batch call: one optimizer step each
BATCH = 12


def verl_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    require_module("verl")
    # verl's import-time warnings: Ray's "state API is no longer experimental", "torchtitan engine is not available"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from verl.utils import tracking
        from verl.workers import engine_workers
        from verl.workers.engine import base
    return tracking, engine_workers, base


@pytest.fixture
def integration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, daemons: list[Daemon]) -> Iterator[Any]:
    """`install()` with both monitors reporting to a real daemon every 50 ms; uninstalled afterwards."""
    verl_modules()
    from trainmon.integrations.verl import install

    daemons.append(start_daemon(tmp_path, ["--collectors", "training", "--interval", "0.2"]))
    monkeypatch.setenv("TRAINMON_INGEST_SOCKET", str(tmp_path / "ingest.sock"))
    monkeypatch.setenv("TRAINMON_REPORT_INTERVAL", "0.05")
    monkeypatch.setenv("TRAINMON_GPU_UUID", "GPU-verl-test")
    installed = install(job_id=JOB)
    yield installed
    installed.uninstall()


def cpu_engine(base: ModuleType) -> Any:
    """A verl engine on the CPU: a linear model and SGD behind `BaseEngine`'s own `train_batch`."""

    class CpuEngine(base.BaseEngine):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            torch.manual_seed(0)
            self.module = torch.nn.Linear(4, 1)
            self.optimizer = torch.optim.SGD(self.module.parameters(), lr=0.1)
            self.norms: list[float] = []

        def is_param_offload_enabled(self) -> bool:
            return False

        def is_optimizer_offload_enabled(self) -> bool:
            return False

        @contextlib.contextmanager
        def train_mode(self, **kwargs: Any) -> Iterator[None]:
            yield

        def optimizer_zero_grad(self) -> None:
            self.optimizer.zero_grad()

        def forward_backward_batch(self, data: Any, loss_function: Any, forward_only: bool = False) -> Any:
            loss = loss_function(self.module(data["x"]), data["y"])
            loss.backward()
            return {"loss": loss.detach(), "metrics": {}}

        def optimizer_step(self) -> float:
            grads = [p.grad for p in self.module.parameters() if p.grad is not None]
            self.norms.append(torch.nn.utils.get_total_norm(grads).item())
            self.optimizer.step()
            return self.norms[-1]

        def lr_scheduler_step(self) -> float:
            return 0.1

        def get_data_parallel_size(self) -> int:
            return 1

        def get_data_parallel_rank(self) -> int:
            return 0

        def is_mp_src_rank_with_outputs(self) -> bool:
            return False

    return CpuEngine()


def training_worker(engine_workers: ModuleType, base: ModuleType) -> Any:
    """A `TrainingWorker` as its `__init__` leaves it (which needs Ray and a GPU), then that `__init__`'s patch."""
    worker = engine_workers.TrainingWorker.__new__(engine_workers.TrainingWorker)
    worker.engine = cpu_engine(base)
    worker.loss_fn = torch.nn.functional.mse_loss
    worker.engine_config = SimpleNamespace(forward_only=False, use_dynamic_bsz=False, max_token_len_per_gpu=None,
                                           micro_batch_size_per_gpu=BATCH // MINI_BATCHES, use_fused_kernels=False)
    worker.model_config = {}
    from verl.utils.profiler import DistProfiler

    worker.profiler = DistProfiler(rank=0, config=None)  # verl's own, disabled as without a profiler config
    return worker


def update_actor_data() -> Any:
    tensordict = require_module("tensordict")
    data = tensordict.TensorDict({"x": torch.randn(BATCH, 4), "y": torch.randn(BATCH, 1)}, batch_size=[BATCH])
    data.set_non_tensor("num_mini_batch", MINI_BATCHES)
    return data


def test_install_patches_the_classes_verl_0_9_1_has() -> None:
    """The anchors exist where the integration expects them, and the dispatch attributes survive the patch."""
    tracking, engine_workers, base = verl_modules()
    from trainmon.integrations.verl import install

    assert ["self", "data", "loss_function"] == list(inspect.signature(base.BaseEngine.train_batch).parameters)
    source = inspect.getsource(base.BaseEngine.train_batch)
    assert source.index("self.optimizer_zero_grad()") < source.index("grad_norm = self.optimizer_step()")
    original = engine_workers.ActorRolloutRefWorker.update_weights
    installed = install(job_id=JOB)
    try:
        patched = engine_workers.ActorRolloutRefWorker.update_weights
        assert patched is not original
        assert inspect.iscoroutinefunction(patched)
        dispatch = {k: v for k, v in vars(original).items() if k != "__wrapped__"}  # what verl's @register set
        assert dispatch
        assert dispatch == {k: v for k, v in vars(patched).items() if k != "__wrapped__"}
        assert engine_workers.TrainingWorker.__init__.__wrapped__ is not None
    finally:
        installed.uninstall()
    assert engine_workers.ActorRolloutRefWorker.update_weights is original
    assert "__wrapped__" not in vars(tracking.Tracking.__init__)


def test_tracking_backend_reports_phases_and_job_gauges_as_the_driver(integration: Any, daemons: list[Daemon]) -> None:
    """verl's own Tracking, as `RayPPOTrainer.fit` makes and calls it, reaches the daemon under rank="driver"."""
    tracking, _, _ = verl_modules()
    logger = tracking.Tracking(project_name="p", experiment_name="e", default_backend=[], config={})
    assert ["trainmon"] == list(logger.logger)
    iteration = {"timing_s/gen": 40.0, "timing_s/update_actor": 12.5, "timing_s/update_weights": 1.5,
                 "timing_s/step": 60.0, "timing_per_token_ms/gen": 0.3, "perf/mfu/actor": 0.41,
                 "actor/grad_norm": 0.75, "critic/score/mean": 0.62, "response_length/mean": 812.0,
                 "response_length/clip_ratio": 0.05, "response/aborted_ratio": 0.0, "actor/pg_loss": 0.1,
                 "val/generations": ["not a number"]}
    logger.log(data=iteration, step=1)
    logger.log(data={**iteration, "critic/score/mean": 0.7, "timing_s/gen": float("nan")}, step=2)

    text = metrics_when(daemons[0], lambda t: bool(samples(t, "trainmon_rl_reward_mean", job_id=JOB)))

    phases = {dict(k)["phase"]: v for k, v in
              samples(text, "trainmon_train_phase_seconds_total", job_id=JOB, rank="driver").items()}
    assert {"gen": 40.0, "update_actor": 25.0, "update_weights": 3.0} == phases
    gauges = {name: list(samples(text, f"trainmon_{name}", job_id=JOB, rank="driver").values())
              for name in ("train_mfu_reported_ratio", "rl_actor_grad_norm", "rl_reward_mean",
                           "rl_response_length_mean", "rl_response_clip_ratio", "rl_aborted_ratio")}
    assert {"train_mfu_reported_ratio": [0.41], "rl_actor_grad_norm": [0.75], "rl_reward_mean": [0.7],
            "rl_response_length_mean": [812.0], "rl_response_clip_ratio": [0.05], "rl_aborted_ratio": [0.0]} == gauges
    # the driver is no rank: the rules that count and compare ranks never see it
    assert not samples(text, "trainmon_train_rank_info", job_id=JOB)
    assert not samples(text, "trainmon_train_steps_total", job_id=JOB)


def test_worker_steps_per_optimizer_step_and_is_in_rollout_between_updates(
        integration: Any, daemons: list[Daemon]) -> None:
    """Two `update_actor`s of 3 mini-batches: 6 steps, the last grad norm, and the `rollout` phase after each."""
    _, engine_workers, base = verl_modules()
    from trainmon.integrations.verl import watch_worker

    worker = training_worker(engine_workers, base)
    watch_worker(worker, integration.worker_monitor, integration.patches)  # what the patched __init__ does
    worker.train_mini_batch(update_actor_data())
    text = metrics_when(daemons[0], lambda t: 1 == sum(
        samples(t, "trainmon_train_phase", job_id=JOB, rank="0", phase="rollout").values()))
    assert [MINI_BATCHES] == list(samples(text, "trainmon_train_steps_total", job_id=JOB, rank="0").values())

    worker.train_mini_batch(update_actor_data())
    report = integration.worker_monitor.report()
    assert (2 * MINI_BATCHES, "verl", "rollout") == (report.steps, report.framework, report.phase)
    assert report.grad_norm == pytest.approx(worker.engine.norms[-1], rel=1e-6)
    assert report.phase_seconds["rollout"] > 0
    text = metrics_when(daemons[0], lambda t: [2.0 * MINI_BATCHES] == list(
        samples(t, "trainmon_train_steps_total", job_id=JOB, rank="0").values()))
    assert 1 == sum(samples(text, "trainmon_train_phase", job_id=JOB, rank="0", phase="rollout").values())


def test_update_weights_runs_in_its_phase_inside_the_rollout_gap(integration: Any) -> None:
    """verl's real (async) `update_weights`, checkpoint-engine mode, through the patched class."""
    _, engine_workers, base = verl_modules()
    from trainmon.integrations.verl import watch_worker

    seen: list[str | None] = []

    class CheckpointEngine:
        async def send_weights(self, params: Any, global_steps: int | None = None) -> dict[str, float]:
            seen.append(integration.worker_monitor.state.phase)
            return {}

    actor = training_worker(engine_workers, base)
    actor.engine.get_per_tensor_param = lambda: ({}, None)
    watch_worker(actor, integration.worker_monitor, integration.patches)
    worker = engine_workers.ActorRolloutRefWorker.__new__(engine_workers.ActorRolloutRefWorker)
    worker.config = SimpleNamespace(rollout=SimpleNamespace(checkpoint_engine=SimpleNamespace(backend="nccl")))
    worker.actor, worker.checkpoint_engine = actor, CheckpointEngine()

    actor.train_mini_batch(update_actor_data())
    asyncio.run(worker.update_weights(global_steps=1))

    assert ["update_weights"] == seen
    assert "rollout" == integration.worker_monitor.state.phase  # back in the gap once the sync is done
    assert set(integration.worker_monitor.state.phase_seconds) == {"rollout", "update_weights"}
    assert wire.decode(wire.encode(integration.worker_monitor.report())).phase == "rollout"


def test_verl_imports_the_auto_module_named_in_its_environment(tmp_path: Path) -> None:
    """`VERL_USE_EXTERNAL_MODULES=trainmon.integrations.verl_auto`: `import verl` installs the integration."""
    require_module("verl")
    script = ("import verl\n"
              "from verl.utils.tracking import Tracking\n"
              "from verl.workers.engine_workers import TrainingWorker\n"
              "print(sorted(Tracking('p', 'e', default_backend=['console']).logger),"
              " hasattr(TrainingWorker.__init__, '__wrapped__'))\n")
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "trainmon.integrations.verl_auto",
           "TRAINMON_INGEST_SOCKET": str(tmp_path / "absent.sock"), "TRAINMON_JOB_ID": JOB}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                          check=False)

    assert 0 == done.returncode, done.stderr
    assert "['console', 'trainmon'] True" == done.stdout.strip().splitlines()[-1]
