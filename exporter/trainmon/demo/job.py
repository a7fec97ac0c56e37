"""A simulated 8-rank training job for `trainmon demo`, fed through the real ingest path.

Each simulated rank is a `RankState` reported by a real `Reporter` over the real transport (the
daemon's Unix socket, or its UDP address when the socket is disabled), so the daemon sees exactly
what a `TrainingMonitor` would send. Standard library only.

The job is plausible rather than random: steps of about a second, throughput numerators, one slow
rank (its peers wait for it in their all-reduces, so they show more collective time), a loss
that falls, fp16 loss-scale backoffs with skipped steps, a checkpoint phase now and then, and the
NCCL environment and parallel layout of a real job. Every collective goes through the rank's per-group
sequence numbers (issued == completed between steps), the model FLOPs are those of an 8B-parameter
transformer (so MFU on the simulated H100s is 45-50%), and each rank has swallowed one hook error (a
dropped report at start-up, as a real hook under a restarting daemon would). Each tick hands the
traffic it made (dataset reads, checkpoint writes, all-reduce bytes) to `traffic`, which advances the
demo's procfs/sysfs tree, and asks the `Plan` whether an incident has started.

Every rank reports `pid = os.getpid()`: the daemon checks a report's pid against the kernel's sender
pid, and all simulated ranks send from this process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial

from trainmon import wire
from trainmon.demo.tree import Traffic
from trainmon.hook.hang import DEFAULT_FLOOR_S
from trainmon.hook.numerics import DEFAULT_MIN_HISTORY
from trainmon.hook.sender import Reporter, Transport, UdpTransport, UnixTransport
from trainmon.hook.state import Identity, RankState
from trainmon.settings import Settings
from trainmon.simulation.incidents import HUNG_RANK, SLOW_LINK_FACTOR, SLOW_LINK_RANK, STRAGGLER_RANK, Plan

JOB_ID = "demo-llama-8b"  # with an incident, `demo-llama-8b-<incident>`: two demos never mix in Prometheus
SMOKE_TEST_SUFFIX = "-smoke-test"
RANKS = 8
STRAGGLER = STRAGGLER_RANK  # this rank computes a little slower; the others wait for it inside collectives
# The straggler's compute time against its peers': 2% is noise, 5% BLOOM-176B's slow GPU, 75% a straggler (its
# score crosses TrainmonStragglerRank's 0.75 once the incident fills 60% of the 5-minute rate window).
SLOWDOWN = {"healthy": 1.02, "slow-gpu": 1.05, "straggler": 1.75}
# BLOOM-176B's first spike, step by step, against the healthy run's grad norm (about 1) and loss.
SPIKE_GRAD_NORMS = (1.0, 4.0, 9.0, 67.0, 604.0, 4000.0)
SPIKE_LOSS_FACTORS = (1.0, 1.0, 1.05, 1.2, 1.55, 2.3)
TICK_SECONDS = 1.0
CHECKPOINT_BPS = 2_000_000_000  # written while the checkpoint phase lasts
SAMPLES_PER_STEP = 5  # per rank: a global batch of 40 sequences
SEQUENCE_TOKENS = 2048
READ_BYTES_PER_STEP = 16 << 20  # what a rank's data loader reads from NVMe per step (shards read ahead)
# Training FLOPs per token of a Llama-3-8B-like model: 6 x 8.03e9 parameters, plus the attention scores
# (12 x 32 layers x 4096 wide x 2048 tokens). 10240 tokens a second per H100 (989 TFLOP/s bf16) is 53% MFU.
FLOPS_PER_TOKEN = 6 * 8.03e9 + 12 * 32 * 4096 * SEQUENCE_TOKENS
GROUP = "default_pg"
# The stacks the hangs' ranks report once past the hook's hang threshold, innermost frame first: the peers wait
# inside their all-reduce; the hung rank computes (`hang`: it never reaches the all-reduce), waits for a batch
# (`hang-data`), or waits on the all-reduce it issued asynchronously (`hang-collective`).
WAITING_STACK = ("/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:2810:all_reduce",
                 "<trainmon wrapper of all_reduce>:14:all_reduce", "/workspace/train.py:151:train_step",
                 "/workspace/train.py:201:main")
HUNG_STACKS = {
    "hang": ("/workspace/llama/model.py:211:apply_rotary", "/workspace/llama/model.py:388:forward",
             "/workspace/train.py:142:train_step", "/workspace/train.py:201:main"),
    "hang-data": ("/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:1328:_next_data",
                  "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:733:__next__",
                  "/workspace/train.py:139:train_step", "/workspace/train.py:201:main"),
    "hang-collective": ("/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:337:wait",
                        "/workspace/llama/overlap.py:58:finish_grad_sync", "/workspace/train.py:153:train_step",
                        "/workspace/train.py:201:main"),
}
PG_TIMEOUT_SECONDS = 600.0  # torch's default NCCL process-group timeout, as the hook reads it from the group
GRADIENT_BYTES = 8_000_000_000
DEMO_ENV = {"NCCL_ALGO": "Ring", "NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "eth0",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def default_uuids() -> list[str]:
    """The simulated node's GPU UUIDs (trainmon.simulation.node), so ranks join their GPUs."""
    return [f"GPU-5e1a7ed0-{i:04x}-4c0d-8e5a-0000d0e0{i:04x}" for i in range(RANKS)]


class SimulatedRank:
    """One rank: its identity, its cumulative state, and a real `Reporter` that sends them."""

    def __init__(self, identity: Identity, transport: Transport, hang_threshold_s: float = DEFAULT_FLOOR_S) -> None:
        self.identity = identity
        self.hang_threshold_s = hang_threshold_s
        self.state = RankState()
        self.state.loss_scale = 65536.0
        self.state.cuda_alloc_retries = self.state.cuda_ooms = 0
        self.state.hook_errors["send_drops"] = 1
        self.state.pg_timeouts[GROUP] = PG_TIMEOUT_SECONDS
        self.reporter = Reporter(self._encode, transport, TICK_SECONDS)
        self._seq = 0
        self.hung_since: float | None = None  # monotonic time the rank stopped progressing (a hang incident)
        self.stack = WAITING_STACK  # where it is stuck once hung
        self.gone = False  # its process ended through an error (`hang-gone`)
        self._stack_sent = False

    def _encode(self, kind: str) -> bytes:
        self._seq += 1
        report = self.state.report(self.identity, seq=self._seq, kind=kind)
        if self.hung_since is not None and time.monotonic() - self.hung_since > self.hang_threshold_s:
            report = dataclasses.replace(report, hang_suspected=1, stack=None if self._stack_sent else self.stack)
            self._stack_sent = True  # once per episode, as the hook sends it
        return wire.encode(report)


class SimulatedJob:
    """Handle of a running simulated job; `stop()` says goodbye for every rank."""

    def __init__(self, connect: Callable[[], Transport], uuids: Sequence[str], plan: Plan | None = None,
                 traffic: Callable[[Traffic], None] | None = None, seed: int = 0,
                 hang_threshold_s: float = DEFAULT_FLOOR_S) -> None:
        """`connect()` makes one rank's transport to the daemon; past `hang_threshold_s` into the hang incident
        the ranks report themselves suspected, with their stacks."""
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._plan = plan or Plan()
        self._traffic = traffic
        self._connect = connect
        self._hang_issued = False
        self._spike_step = 0  # steps into the planted loss spike
        self.job_id = JOB_ID if self._plan.incident is None else f"{JOB_ID}-{self._plan.incident}"
        self.ranks = [SimulatedRank(self._identity(self.job_id, rank, uuids[rank % len(uuids)]), connect(),
                                    hang_threshold_s)
                      for rank in range(RANKS)]
        self._thread = threading.Thread(target=self._run, name="trainmon-demo-job", daemon=True)
        self._thread.start()

    @staticmethod
    def _identity(job_id: str, rank: int, uuid: str) -> Identity:
        return Identity(job_id=job_id, rank=rank, pid=os.getpid(), start_time=time.time(), local_rank=rank,
                        world_size=RANKS, uuid=uuid, backend="nccl", framework="ddp", loss_scaler="torch_amp",
                        nccl_env=dict(DEMO_ENV), pipeline_stage=0,
                        parallel={"tp": 1, "pp": 1, "dp": RANKS, "micro_batch": SAMPLES_PER_STEP,
                                  "global_batch": SAMPLES_PER_STEP * RANKS})

    def _earlier_visitors(self) -> bool:
        """A one-step smoke test of the job that exited cleanly (a rank exit), and a datagram from a hook
        of another wire version (an ingest rejection), so that those series have something to show.

        Returns whether the daemon took them; until then they are tried again every tick.
        """
        smoke = SimulatedRank(self._identity(self.job_id + SMOKE_TEST_SUFFIX, 0, self.ranks[0].identity.uuid),
                              self._connect())
        smoke.state.finish_step(samples=SAMPLES_PER_STEP, tokens=SAMPLES_PER_STEP * SEQUENCE_TOKENS)
        smoke.reporter.send_now()
        delivered = smoke.reporter.sent == 1
        smoke.reporter.stop(bye=delivered)
        if delivered:
            other_version = self._connect()
            with contextlib.suppress(OSError):
                other_version.send(b'{"v": 99, "type": "report"}')
            other_version.close()
        return delivered

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for sim in self.ranks:
            if not sim.gone:
                sim.reporter.stop(bye=True)

    def _run(self) -> None:
        started = time.monotonic()
        visited = False
        checkpoints_taken = 0
        while not self._stop.wait(TICK_SECONDS):
            visited = visited or self._earlier_visitors()
            hung = self._plan.hang()
            elapsed = time.monotonic() - started
            # A checkpoint whose window fell between two late ticks (a loaded machine) is still taken, for a tick.
            begun = self._plan.checkpoints_begun(elapsed)
            in_phase = (self._plan.checkpointing(elapsed) or begun > checkpoints_taken) and not hung
            checkpoints_taken = begun if in_phase else checkpoints_taken
            # no rank steps, heartbeats go on: a hung input pipeline (stall), or a rank stuck before a collective
            stalled = self._plan.active("stall") or hung is not None
            if hung and not self._hang_issued:
                self._hang(hung)
            collapse = self._plan.active("loss-scale")  # every step overflows in fp16
            skip = collapse or (not in_phase and self._random.random() < 0.004)  # an overflow, all ranks alike
            allreduce = [0] * len(self.ranks)
            kernels = [0.0] * len(self.ranks)
            for sim in self.ranks:
                sim.state.phase = "checkpoint" if in_phase else None
                if not in_phase and not stalled:
                    allreduce[sim.identity.rank], kernels[sim.identity.rank] = self._advance(sim, skip)
                if not sim.gone:
                    sim.reporter.send_now()
            # Every rank takes the same step of the spike, once their spike detectors have the history they judge
            # by: on a loaded machine the job steps less often than the plan's clock runs, and a spike played
            # earlier would go uncounted (no TrainmonLossSpike).
            if (self._plan.active("loss-spike") and not in_phase and not stalled
                    and all(sim.state.steps > DEFAULT_MIN_HISTORY for sim in self.ranks)):
                self._spike_step += 1
            if self._traffic is not None:
                stepped = not in_phase and not stalled
                self._traffic(Traffic(read_bytes=len(self.ranks) * READ_BYTES_PER_STEP if stepped else 0,
                                      written_bytes=int(CHECKPOINT_BPS * TICK_SECONDS) if in_phase else 0,
                                      allreduce_bytes=allreduce, allreduce_seconds=kernels))

    def _hang(self, hang: str) -> None:
        """Rank `HUNG_RANK` stops where `hang` says (before its next collective, in its data loader, inside the
        all-reduce, or its process ends through an error); its peers issue their all-reduce and wait in it for good."""
        self._hang_issued = True
        for sim in self.ranks:
            sim.hung_since = time.monotonic()
            culprit = sim.identity.rank == HUNG_RANK
            if culprit and hang == "hang-gone":
                sim.state.exit_reason = "error"  # an uncaught exception: the hook's goodbye says so
                sim.gone = True
                sim.reporter.stop(bye=True)
                continue
            if not culprit or hang == "hang-collective":
                sim.state.issue(sim.state.sequences(GROUP), "all_reduce", time.perf_counter())
            if culprit:
                sim.stack = HUNG_STACKS[hang]

    def _advance(self, sim: SimulatedRank, skip: bool) -> tuple[int, float]:
        """One step of `sim`; returns the bytes its all-reduces put on its InfiniBand rail, and their kernels' GPU
        time (NCCL Inspector's view)."""
        state, rank, rnd = sim.state, sim.identity.rank, self._random
        slowdown = SLOWDOWN[next((i for i in ("straggler", "slow-gpu") if self._plan.active(i)), "healthy")]
        # Identical GPUs vary little step to step: the straggler's 2% shows over a step or two.
        compute = 0.62 * (slowdown if rank == STRAGGLER else 1.0) * rnd.uniform(0.995, 1.005)
        slowest = 0.62 * slowdown * 1.005
        wait_for_peers = max(0.0, slowest - compute)  # the straggler's peers wait inside the all-reduce
        congested = 5.0 if self._plan.active("comm-bound") else 1.0  # a degraded fabric: slow all-reduces
        transfer = 0.18 * congested * rnd.uniform(0.95, 1.05)
        data = (0.4 if self._plan.active("storage-slow") else 0.02) * rnd.uniform(0.5, 1.5)  # slow Lustre reads
        step = compute + transfer + wait_for_peers + data
        state.observe_step_seconds(step)
        state.data_wait += data
        gradient_bytes = GRADIENT_BYTES // len(self.ranks)
        state.group_label(GROUP, len(self.ranks))
        if state.first_step is None:
            state.first_step = time.time() - step
        kernels = transfer * 0.7 + wait_for_peers
        collective(state, "all_reduce", 25, gradient_bytes, kernels, transfer * (1 - 0.7 / congested) + wait_for_peers)
        collective(state, "all_gather", 2, 4096, 0.002, 0.002)
        collective(state, "broadcast", 1, 8, 0.001, 0.001)
        tokens = SAMPLES_PER_STEP * SEQUENCE_TOKENS
        state.finish_step(samples=SAMPLES_PER_STEP, tokens=tokens, microbatches=1)  # micro_batch is the whole step
        state.add_flops(tokens * FLOPS_PER_TOKEN)
        self._numerics(state, skip)
        slow_link = SLOW_LINK_FACTOR if rank == SLOW_LINK_RANK and self._plan.active("comm-bound") else 1.0
        return 2 * (len(self.ranks) - 1) * gradient_bytes // len(self.ranks), kernels * slow_link  # a ring's share

    def _numerics(self, state: RankState, skip: bool) -> None:
        """The loss scale (halved by an overflow, doubled every 2,000 good steps), the loss and the grad norm."""
        rnd = self._random
        if skip:
            state.skipped_steps += 1
            state.loss_scale = max(1.0, (state.loss_scale or 1.0) / 2)
        elif state.steps and state.steps % 2000 == 0:
            state.loss_scale = (state.loss_scale or 1.0) * 2
        spike = self._spike_step if self._plan.active("loss-spike") else len(SPIKE_GRAD_NORMS)
        loss = 1.6 + 2.4 * math.exp(-state.steps / 1500) + rnd.gauss(0, 0.03)
        state.set_loss(loss * (SPIKE_LOSS_FACTORS[spike] if spike < len(SPIKE_LOSS_FACTORS) else 1.0))
        state.set_grad_norm(SPIKE_GRAD_NORMS[spike] if spike < len(SPIKE_GRAD_NORMS) else abs(rnd.gauss(1.0, 0.15)))


def collective(state: RankState, op: str, calls: int, nbytes: int, seconds: float, blocked: float) -> None:
    """`calls` collectives of `op` on the default group, issued and completed: `nbytes`, `seconds` and
    `blocked` are their totals."""
    seqs = state.sequences(GROUP)
    for _ in range(calls):
        state.complete(state.issue(seqs, op, time.perf_counter(), nbytes // calls), seconds / calls, blocked / calls)


def start_simulated_job(settings: Settings, uuids: Sequence[str] | None = None, plan: Plan | None = None,
                        traffic: Callable[[Traffic], None] | None = None,
                        hang_threshold_s: float = DEFAULT_FLOOR_S) -> SimulatedJob:
    """Start 8 simulated ranks reporting to the daemon configured by `settings`.

    Reports go to `settings.ingest_socket`, or to `settings.ingest_udp` when the socket is disabled.

    Raises:
        ValueError: neither ingest path is configured.
    """
    connect: Callable[[], Transport]
    if settings.ingest_socket:
        connect = partial(UnixTransport, settings.ingest_socket)
    elif settings.ingest_udp is not None:
        connect = partial(UdpTransport, str(settings.ingest_udp))
    else:
        raise ValueError("the demo job needs --ingest-socket or --ingest-udp")
    return SimulatedJob(connect, uuids or default_uuids(), plan, traffic, hang_threshold_s=hang_threshold_s)
