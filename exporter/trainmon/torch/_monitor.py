"""`TrainingMonitor`: the hook's public object (SPEC §5).

It never raises into training (a failure is counted, logged once, and the monitor carries on or
switches itself off), never blocks on the daemon, and never adds a device synchronisation.

Threads: every CUDA call (events, `Work.is_completed`, `torch.cuda.memory_stats`) is made on the training
thread, at step boundaries, in `wait()` and in `report()`; the reporter thread only copies the values
and sends them (`_snapshot`), so it cannot break a CUDA graph capture, and it keeps sending through a
hang, with the last values and in-flight ages from CPU clocks, and past the hang threshold the training
thread's Python stack (`_hang`). One monitor per process: the collectives'
patches are process-wide.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from time import perf_counter
from types import TracebackType
from typing import Any

try:
    import torch
    import torch.distributed as dist
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("trainmon.torch needs PyTorch: pip install 'trainmon[torch]'") from exc

from trainmon import wire
from trainmon.flops import FlopsRate
from trainmon.hook.hang import HangWatch, floor_from
from trainmon.hook.identity import int_env, kubernetes_pod, launch_layout, nccl_env, resolve_job_id
from trainmon.hook.numerics import DEFAULT_MIN_HISTORY, DEFAULT_WINDOW, SpikeCounter, SpikeRules
from trainmon.hook.sender import Reporter, Transport, interval_from_env, transport_from_env
from trainmon.hook.state import Identity, RankState
from trainmon.torch._collectives import CollectiveRecorder
from trainmon.torch._scaler import HostCopies, Patches, watch_deepspeed, watch_grad_scaler, watch_megatron
from trainmon.torch._timing import DeviceSpans, StepTimer

log = logging.getLogger(__name__)
NCCL_TIMING_ENV = "TRAINMON_NCCL_TIMING"  # 1: async collectives' time from the backend (Work._get_duration)
_live: list[TrainingMonitor] = []  # the process's enabled, not closed monitor (at most one)

MEGATRON_PARALLEL = {
    "tp": "get_tensor_model_parallel_world_size",
    "pp": "get_pipeline_model_parallel_world_size",
    "dp": "get_data_parallel_world_size",
    "cp": "get_context_parallel_world_size",
    "ep": "get_expert_model_parallel_world_size",
}


class TrainingMonitor:
    """Reports this process's training metrics to the node's trainmon daemon.

    Args:
        job_id: the job's id, the same on every rank; resolved from the environment when None
            (`TRAINMON_JOB_ID`, Slurm, torchelastic, a hash of `MASTER_ADDR:MASTER_PORT`).
        parallel: the parallel layout (`tp`, `pp`, `dp`, `cp`, `ep`, `micro_batch`, `global_batch`);
            read from Megatron's `parallel_state` when that is initialised and this is None.
        pipeline_stage: this rank's pipeline stage (0 first), so a slow stage is told from a slow GPU; read
            from Megatron's `parallel_state` when that is initialised and this is None.
        transport: where reports go; by default `TRAINMON_INGEST_UDP` or `TRAINMON_INGEST_SOCKET`.
        env: the environment to read (default `os.environ`).
        flops_per_token, flops_per_sample, flops_per_step: the model FLOPs of a step (give one;
            `trainmon.flops.transformer_flops_per_token` estimates a dense transformer's), so
            `trainmon_train_model_flops_total` and MFU need no guessing. `step_end` takes the same.
        loss_spike_factor: a loss above this x the mean of the last `spike_window` finite losses counts
            in `trainmon_train_loss_spikes_total` (llm-foundry's 2).
        grad_norm_spike_factor: a grad norm above this x their median counts in
            `trainmon_train_grad_norm_spikes_total` (10).
        spike_window: the steps both rolling statistics cover (100).
        hang_threshold_s: the floor of the hang threshold (default `TRAINMON_HANG_THRESHOLD_S`, else 30): past
            the larger of it and 5x the median step, a rank whose collective or step has not moved is reported
            as `trainmon_train_hang_suspected`, with its training thread's stack once per episode.

    Raises:
        ValueError: more than one FLOPs keyword, or a negative or non-finite one; a spike factor not above 1
            or a window outside 1..10000; a pipeline stage that is not a non-negative integer; a hang threshold
            that is not a positive number.
        RuntimeError: another monitor is live in this process (its patches see every collective of the
            process, so a second would count nothing): use that one, or `close()` it first.
    """

    def __init__(
        self,
        job_id: str | None = None,
        *,
        parallel: Mapping[str, int] | None = None,
        pipeline_stage: int | None = None,
        transport: Transport | None = None,
        env: Mapping[str, str] | None = None,
        flops_per_token: float | None = None,
        flops_per_sample: float | None = None,
        flops_per_step: float | None = None,
        loss_spike_factor: float = 2.0,
        grad_norm_spike_factor: float = 10.0,
        spike_window: int = DEFAULT_WINDOW,
        hang_threshold_s: float | None = None,
    ) -> None:
        spike_rules = SpikeRules(loss_spike_factor, grad_norm_spike_factor, spike_window,
                                 min(DEFAULT_MIN_HISTORY, spike_window))
        self._flops = FlopsRate(flops_per_token, flops_per_sample, flops_per_step)
        if pipeline_stage is not None and (type(pipeline_stage) is not int or not 0 <= pipeline_stage < wire.MAX_ID):
            raise ValueError(f"pipeline_stage must be a non-negative integer, not {pipeline_stage!r}")
        self._pipeline_stage = pipeline_stage
        self._env = os.environ if env is None else env
        self._hang = HangWatch(floor_from(hang_threshold_s, self._env))
        self.enabled = self._env.get("TRAINMON_DISABLE", "").lower() not in {"1", "true", "yes"}
        if self.enabled:
            _claim_process(self)
        self.state = RankState(spike_rules)
        self.identity = Identity(job_id=job_id or resolve_job_id(self._env), rank=0, pid=os.getpid(),
                                 start_time=time.time())
        self._monitor_errors = 0
        self._scaler_errors = [0]  # a one-element cell: the scaler probes add to it in place
        self._warned = False
        self._seq = itertools.count(1)
        self._parallel = dict(parallel or {})
        self._stepped = False  # identity is read again at the first step (after init_process_group)
        self._device: int | None = None
        self._spans = DeviceSpans() if torch.cuda.is_available() else None
        self._timer = StepTimer(self.state.observe_step_seconds)
        self._copies = HostCopies()
        self._patches = Patches()
        self._collectives = CollectiveRecorder(self.state, self._spans,
                                               nccl_timing=self._env.get(NCCL_TIMING_ENV, "") == "1")
        self._memory_due = True  # the reporter asks for the allocator's counters; the training thread reads them
        self._reporter: Reporter | None = None
        self._previous_excepthook = sys.excepthook
        self._previous_thread_excepthook = threading.excepthook
        if self.enabled:
            self._start(transport)

    def _start(self, transport: Transport | None) -> None:
        """Identity, the collective wrappers, the reporter and the exception hooks; a failure disables the
        monitor and never reaches training."""
        try:
            self.identity.nccl_env = nccl_env(self._env)
            pod = kubernetes_pod(self._env)
            self.identity.pod, self.identity.namespace = pod.pod, pod.namespace
            self._refresh_identity()
            if dist.is_available():
                self._collectives.install()
            self._reporter = Reporter(self._encode, transport or transport_from_env(self._env),
                                      interval_from_env(self._env))
            if (dist.is_available() and dist.is_initialized()) or "RANK" in self._env:
                self._reporter.start()  # otherwise at watch() or the first step, once the rank is known
            self._hook_exceptions()
            atexit.register(self.close)
        except Exception as exc:
            self._fail(exc)
            self.enabled = False
            if self in _live:
                _live.remove(self)

    # -- setup ------------------------------------------------------------------------------------

    def watch(self, model: Any = None, optimizer: Any = None, scaler: Any = None) -> TrainingMonitor:
        """Attach to whichever of the model, optimizer and loss scaler exist.

        A DDP model gets a timing comm hook: a comm hook you register after `watch` runs inside it
        and is timed; one registered before is left alone (DDP's all-reduce is then not timed). A
        DeepSpeed engine, a Megatron-style optimizer or a `torch.amp.GradScaler` report loss scale
        and skipped steps. The `framework` label is set from what is watched unless an adapter set it.
        """
        if not self.enabled:
            return self
        try:
            self._refresh_identity()
            self._start_reporting()
            if isinstance(model, torch.nn.parallel.DistributedDataParallel):
                self._collectives.watch_ddp(model)
                self._framework("ddp")
            elif model is not None and hasattr(model, "skipped_steps") and hasattr(model, "step"):
                self.identity.loss_scaler = watch_deepspeed(model, self.state, self._patches, self._scaler_errors)
                self._framework("deepspeed")
            if optimizer is not None and hasattr(optimizer, "get_loss_scale"):
                self.identity.loss_scaler = watch_megatron(optimizer, self.state, self._copies, self._patches,
                                                           self._scaler_errors)
                self._framework("megatron")
            if scaler is not None and watch_grad_scaler(scaler, self.state, self._copies, self._patches,
                                                        self._scaler_errors):
                self.identity.loss_scaler = "torch_amp"
        except Exception as exc:
            self._fail(exc)
        return self

    def _framework(self, name: str) -> None:
        if self.identity.framework in {"torch", "ddp"}:  # an adapter's label wins; Megatron wins over DDP
            self.identity.framework = name

    def set_framework(self, name: str) -> None:
        """The `framework` label (adapters set `lightning` or `hf`)."""
        self.identity.framework = name

    # -- the loop ---------------------------------------------------------------------------------

    def step(self, samples: int = 0, tokens: int = 0, microbatches: int = 0) -> Step:
        """`with mon.step(samples=..., tokens=..., microbatches=...) as s:` times one step; set `s.loss`/`s.grad_norm`
        inside. `tokens` are the real tokens the rank processed (padding left out), `microbatches` the forward and
        backward passes the step ran (gradient accumulation): what tells a rank given more work from a slow one."""
        return Step(self, samples, tokens, microbatches)

    def step_begin(self) -> None:
        if not self.enabled:
            return
        try:
            if not self._stepped:
                self._stepped = True
                self.state.first_step = time.time()
                self._hang.thread = threading.get_ident()
                self._refresh_identity()
                self._start_reporting()
            on_gpu = torch.cuda.is_initialized()
            if on_gpu and self._device is None:
                self._device = torch.cuda.current_device()
            self._timer.begin(self._spans if on_gpu else None)
        except Exception as exc:
            self._fail(exc)

    def step_end(self, samples: int = 0, tokens: int = 0, loss: Any = None, grad_norm: Any = None, *,
                 flops_per_token: float | None = None, flops_per_sample: float | None = None,
                 flops_per_step: float | None = None, microbatches: int = 0) -> None:
        """Close the step; `loss` and `grad_norm` may be floats or one-element tensors (read without a sync).

        `tokens` and `microbatches` as for `step`. A FLOPs keyword given here counts this step instead of the one
        given to the monitor.
        """
        if not self.enabled:
            return
        try:
            self._timer.end()
            self.state.finish_step(int(samples), int(tokens), int(microbatches))
            self._count_flops(int(samples), int(tokens), flops_per_token, flops_per_sample, flops_per_step)
            # A float is observed here, in one call: `_read`'s isinstance(torch.Tensor) alone costs more (90 ns).
            if loss is not None:
                if type(loss) is float:
                    self.state.losses.observe(loss)
                else:
                    self._read(loss, self.state.losses)
            if grad_norm is not None:
                if type(grad_norm) is float:
                    self.state.grad_norms.observe(grad_norm)
                else:
                    self._read(grad_norm, self.state.grad_norms)
            if self._spans is not None:
                self._spans.poll()
            self._copies.poll()
            self._collectives.poll(step_end=True)
            if self._memory_due:
                self._memory_due = False
                self._read_memory_stats()
        except Exception as exc:
            self._fail(exc)

    def dataloader(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Iterate `loader`, adding the time spent waiting for each batch to the data-wait counter."""
        return self._timed(iter(loader)) if self.enabled else iter(loader)

    def _timed(self, iterator: Iterator[Any]) -> Iterator[Any]:
        while True:
            t0 = perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                return
            self.state.data_wait += perf_counter() - t0
            yield item

    def phase(self, name: str) -> Phase:
        """`with mon.phase("checkpoint"):` marks a long pause that is not a stall."""
        return Phase(self.state, name[: wire.MAX_TEXT])

    # -- reporting --------------------------------------------------------------------------------

    def report(self, kind: str = "report") -> wire.Report:
        """The current cumulative values, collectives and device spans that completed since the last look
        resolved first, on the calling thread (call it from the training thread)."""
        self._resolve()
        return self._snapshot(kind)

    def _resolve(self) -> None:
        """What only the training thread may do (CUDA calls): complete what finished, read the allocator."""
        self._collectives.poll()
        if self._spans is not None:
            self._spans.poll()
        self._read_memory_stats()

    def _snapshot(self, kind: str) -> wire.Report:
        """The values as they stand, without a CUDA call: what the reporter thread sends."""
        self.state.hook_errors = self._hook_errors()
        self.state.collectives_captured = self._collectives.captured
        return self.state.report(self.identity, seq=next(self._seq), kind=kind)

    @property
    def reporter(self) -> Reporter | None:
        return self._reporter

    def close(self) -> None:
        """Send the goodbye, stop the thread and remove every patch; idempotent."""
        atexit.unregister(self.close)
        reporter, self._reporter = self._reporter, None
        if self in _live:
            _live.remove(self)
        try:
            if self.enabled:
                self._resolve()  # the goodbye carries every completion
            if reporter is not None:  # a forked child (a data-loader worker) must not say goodbye for us
                reporter.stop(bye=os.getpid() == self.identity.pid)
            self._collectives.uninstall()
            self._patches.restore()
            self._unhook_exceptions()
        except Exception as exc:
            self._fail(exc)
        self.enabled = False

    # -- internals --------------------------------------------------------------------------------

    def _start_reporting(self) -> None:
        if self._reporter is not None and not self._reporter.started:
            self._reporter.start()

    def _encode(self, kind: str) -> bytes:
        """The reporter thread's datagram: no CUDA call here (`_snapshot`); the next step end reads the
        allocator's counters for the report after."""
        self._memory_due = True
        report = self._hang.mark(self._snapshot(kind), self.state.progress_at)
        data = wire.encode(report)
        if len(data) > wire.MAX_DATAGRAM:  # long NCCL values and group names: keep the numbers
            data = wire.encode(dataclasses.replace(report, nccl_env={}))
        if len(data) > wire.MAX_DATAGRAM:  # and then the stack
            data = wire.encode(dataclasses.replace(report, nccl_env={}, stack=None))
        return data

    def _hook_errors(self) -> dict[str, int]:
        """Every error and drop the hook swallowed, by kind (kinds that never happened are left out)."""
        reporter = self._reporter
        counts = {
            "monitor": self._monitor_errors,
            "collective": self._collectives.errors,
            "scaler": self._scaler_errors[0],
            "device_span_dropped": self._spans.errors if self._spans is not None else 0,
            "host_copy_dropped": self._copies.dropped,
            "send_dropped": reporter.dropped if reporter is not None else 0,
            "send_unreachable": reporter.unreachable if reporter is not None else 0,
            "send_failed": reporter.errors if reporter is not None else 0,
        }
        return {kind: n for kind, n in counts.items() if n}

    def _count_flops(self, samples: int, tokens: int, *step_rate: float | None) -> None:
        rate = FlopsRate(*step_rate) if any(v is not None for v in step_rate) else self._flops
        if rate.known:
            self.state.add_flops(rate.of_step(samples, tokens))

    def _read(self, value: Any, counter: SpikeCounter) -> None:
        if isinstance(value, torch.Tensor):
            self._copies.read([value], lambda v: counter.observe(v[0]))
        else:
            counter.observe(float(value))

    def _read_memory_stats(self) -> None:
        if self._device is None:
            return
        stats = torch.cuda.memory_stats(self._device)
        self.state.cuda_alloc_retries = int(stats.get("num_alloc_retries", 0))
        self.state.cuda_ooms = int(stats.get("num_ooms", 0))

    def _refresh_identity(self) -> None:
        ident, env = self.identity, self._env
        if dist.is_available() and dist.is_initialized():
            ident.rank, ident.world_size = dist.get_rank(), dist.get_world_size()
            ident.backend = str(dist.get_backend())
            ident.local_rank = int_env(env, "LOCAL_RANK")
        else:
            ident.rank, ident.world_size, ident.local_rank = launch_layout(env)
        ident.uuid = env.get("TRAINMON_GPU_UUID", "") or _gpu_uuid()
        ident.parallel = {k: v for k, v in (self._parallel or _megatron_parallel()).items()
                          if k in wire.PARALLEL_KEYS and isinstance(v, int) and v >= 0}
        ident.pipeline_stage = self._pipeline_stage if self._pipeline_stage is not None else _megatron_stage()

    def _hook_exceptions(self) -> None:
        """An uncaught exception still runs atexit: chain the excepthooks so the goodbye says `error`."""
        self._previous_excepthook, sys.excepthook = sys.excepthook, self._uncaught
        self._previous_thread_excepthook, threading.excepthook = threading.excepthook, self._uncaught_in_thread

    def _unhook_exceptions(self) -> None:
        if sys.excepthook == self._uncaught:
            sys.excepthook = self._previous_excepthook
        if threading.excepthook == self._uncaught_in_thread:
            threading.excepthook = self._previous_thread_excepthook

    def _uncaught(self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        self.state.exit_reason = "error"
        self._previous_excepthook(exc_type, exc, tb)

    def _uncaught_in_thread(self, args: threading.ExceptHookArgs) -> None:
        if not issubclass(args.exc_type, SystemExit):  # what the default hook ignores too
            self.state.exit_reason = "error"
        self._previous_thread_excepthook(args)

    def _fail(self, exc: BaseException) -> None:
        self._monitor_errors += 1
        if not self._warned:
            self._warned = True
            log.warning("trainmon hook error (training continues) error=%r", exc)


class Step:
    """One step, as a context manager; a step whose body raised is not counted."""

    __slots__ = ("grad_norm", "loss", "microbatches", "monitor", "samples", "tokens")

    def __init__(self, monitor: TrainingMonitor, samples: int, tokens: int, microbatches: int) -> None:
        self.monitor = monitor
        self.samples = samples
        self.tokens = tokens
        self.microbatches = microbatches
        self.loss: Any = None
        self.grad_norm: Any = None

    def __enter__(self) -> Step:
        self.monitor.step_begin()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.monitor.step_end(self.samples, self.tokens, self.loss, self.grad_norm,
                                  microbatches=self.microbatches)


class Phase:
    __slots__ = ("_name", "_previous", "_state")

    def __init__(self, state: RankState, name: str) -> None:
        self._state = state
        self._name = name
        self._previous: str | None = None

    def __enter__(self) -> Phase:
        self._previous, self._state.phase = self._state.phase, self._name
        return self

    def __exit__(self, *exc: object) -> None:
        self._state.phase = self._previous


def _claim_process(monitor: TrainingMonitor) -> None:
    """Make `monitor` the process's one live monitor, or refuse it loudly."""
    if _live and _live[0].identity.pid == os.getpid():
        first = _live[0]
        raise RuntimeError(
            f"a TrainingMonitor is already live in this process (job {first.identity.job_id!r}); its patches see "
            "every collective here, so a second would count nothing: use that one, or close() it first")
    _live[:] = [monitor]  # a monitor inherited through fork is the parent's, not this process's


def _gpu_uuid() -> str:
    """The current GPU in NVML form (`GPU-...`; torch prints it without the prefix), or ""."""
    if not torch.cuda.is_initialized():
        return ""
    uuid = str(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", "") or "")
    return uuid if not uuid or uuid.startswith("GPU-") else f"GPU-{uuid}"


def _megatron_state() -> Any:
    """Megatron's `parallel_state` module, if Megatron is loaded and initialised (never imported here), or None."""
    ps = sys.modules.get("megatron.core.parallel_state")
    if ps is None or not getattr(ps, "model_parallel_is_initialized", lambda: False)():
        return None
    return ps


def _megatron_stage() -> int | None:
    """This rank's pipeline stage from Megatron's `parallel_state`, or None."""
    ps = _megatron_state()
    try:
        stage = ps.get_pipeline_model_parallel_rank() if ps is not None else None
    except Exception:  # initialised without a pipeline group
        return None
    return stage if type(stage) is int and stage >= 0 else None


def _megatron_parallel() -> dict[str, int]:
    """The layout from Megatron's `parallel_state`, if Megatron is loaded and initialised."""
    ps = _megatron_state()
    if ps is None:
        return {}
    out = {}
    for key, getter in MEGATRON_PARALLEL.items():
        try:
            out[key] = int(getattr(ps, getter)())
        except Exception:  # an older Megatron without that dimension
            continue
    return out
