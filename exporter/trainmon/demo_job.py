"""A simulated 8-rank training job for `trainmon demo`, fed through the real ingest path.

Each simulated rank is a `RankState` reported by a real `Reporter` over the real transport (the
daemon's Unix socket, or its UDP address when the socket is disabled), so the daemon sees exactly
what a `TrainingMonitor` would send. Standard library only.

The job is plausible rather than random: steps of about a second, throughput numerators, one slow
rank (its peers wait for it in their all-reduces, so they show more collective time), a loss
that falls, fp16 loss-scale backoffs with skipped steps, a checkpoint phase now and then, and the
NCCL environment and parallel layout of a real job.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Sequence

from trainmon import wire
from trainmon.settings import Settings
from trainmon.torch._sender import Reporter, Transport, UdpTransport, UnixTransport
from trainmon.torch._state import Identity, RankState

JOB_ID = "demo-llama-8b"
RANKS = 8
STRAGGLER = 5  # this rank computes 15% slower; the others wait for it inside collectives
TICK_SECONDS = 1.0
CHECKPOINT_EVERY = 300  # steps
CHECKPOINT_SECONDS = 8.0
DEMO_ENV = {"NCCL_ALGO": "Ring", "NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "eth0",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def default_uuids() -> list[str]:
    """The simulated node's GPU UUIDs (trainmon.nvml.simulated), so ranks join their GPUs."""
    return [f"GPU-5e1a7ed0-{i:04x}-4c0d-8e5a-0000d0e0{i:04x}" for i in range(RANKS)]


class SimulatedRank:
    """One rank: its identity, its cumulative state, and a real `Reporter` that sends them."""

    def __init__(self, identity: Identity, transport: Transport) -> None:
        self.identity = identity
        self.state = RankState()
        self.state.loss_scale = 65536.0
        self.state.cuda_alloc_retries = self.state.cuda_ooms = 0
        self.reporter = Reporter(self._encode, transport, TICK_SECONDS)
        self._seq = 0

    def _encode(self, kind: str) -> bytes:
        self._seq += 1
        return wire.encode(self.state.report(self.identity, seq=self._seq, kind=kind))


class SimulatedJob:
    """Handle of a running simulated job; `stop()` says goodbye for every rank."""

    def __init__(self, transports: Sequence[Transport], uuids: Sequence[str], seed: int = 0) -> None:
        self._random = random.Random(seed)
        self._stop = threading.Event()
        start = time.time()
        self.ranks = [
            SimulatedRank(Identity(job_id=JOB_ID, rank=rank, pid=40_000 + rank, start_time=start, local_rank=rank,
                                   world_size=len(transports), uuid=uuids[rank % len(uuids)], backend="nccl",
                                   framework="ddp", loss_scaler="torch_amp", nccl_env=dict(DEMO_ENV),
                                   parallel={"tp": 1, "pp": 1, "dp": len(transports), "micro_batch": 4,
                                             "global_batch": 256}),
                          transport)
            for rank, transport in enumerate(transports)
        ]
        self._thread = threading.Thread(target=self._run, name="trainmon-demo-job", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for sim in self.ranks:
            sim.reporter.stop(bye=True)

    def _run(self) -> None:
        pause_until = 0.0
        while not self._stop.wait(TICK_SECONDS):
            now = time.monotonic()
            steps = self.ranks[0].state.steps
            in_phase = now < pause_until
            if not in_phase and steps and steps % CHECKPOINT_EVERY == 0 and self.ranks[0].state.phase is None:
                pause_until = now + CHECKPOINT_SECONDS
                in_phase = True
            skip = not in_phase and self._random.random() < 0.004  # an fp16 overflow, all ranks alike
            for sim in self.ranks:
                sim.state.phase = "checkpoint" if in_phase else None
                if not in_phase:
                    self._advance(sim, skip)
                sim.reporter.send_now()

    def _advance(self, sim: SimulatedRank, skip: bool) -> None:
        state, rank, rnd = sim.state, sim.identity.rank, self._random
        compute = 0.62 * (1.15 if rank == STRAGGLER else 1.0) * rnd.uniform(0.97, 1.03)
        slowest = 0.62 * 1.15 * 1.03
        wait_for_peers = max(0.0, slowest - compute)  # the straggler's peers wait inside the all-reduce
        transfer = 0.18 * rnd.uniform(0.95, 1.05)
        data = 0.02 * rnd.uniform(0.5, 1.5)
        step = compute + transfer + wait_for_peers + data
        state.observe_step_seconds(step)
        state.data_wait += data
        gradient_bytes = 8_000_000_000 // len(self.ranks)
        state.add_collective("all_reduce", "default_pg", 25, gradient_bytes, transfer * 0.7 + wait_for_peers,
                             transfer * 0.3 + wait_for_peers)
        state.add_collective("all_gather", "default_pg", 2, 4096, 0.002, 0.002)
        state.add_collective("broadcast", "default_pg", 1, 8, 0.001, 0.001)
        state.group_label("default_pg", len(self.ranks))
        if skip:
            state.skipped_steps += 1
            state.loss_scale = max(1.0, (state.loss_scale or 1.0) / 2)
        elif state.steps and state.steps % 2000 == 0:
            state.loss_scale = (state.loss_scale or 1.0) * 2
        state.finish_step(samples=32, tokens=32 * 4096)
        state.set_loss(1.6 + 2.4 * math.exp(-state.steps / 1500) + rnd.gauss(0, 0.03))
        state.grad_norm = abs(rnd.gauss(1.0, 0.15))


def start_simulated_job(settings: Settings, uuids: Sequence[str] | None = None) -> SimulatedJob:
    """Start 8 simulated ranks reporting to the daemon configured by `settings`.

    Reports go to `settings.ingest_socket`, or to `settings.ingest_udp` when the socket is disabled.

    Raises:
        ValueError: neither ingest path is configured.
    """
    transports: list[Transport]
    if settings.ingest_socket:
        transports = [UnixTransport(settings.ingest_socket) for _ in range(RANKS)]
    elif settings.ingest_udp is not None:
        transports = [UdpTransport(str(settings.ingest_udp)) for _ in range(RANKS)]
    else:
        raise ValueError("the demo job needs --ingest-socket or --ingest-udp")
    return SimulatedJob(transports, uuids or default_uuids())
