"""NCCL's own outputs on the demo node, SIMULATED: NCCL Inspector's Prometheus textfiles and an NCCL RAS port.

Both in the formats NCCL writes them (parsers/nccl_inspector.py, parsers/nccl_ras.py), made up from the
simulated job's all-reduces, so the real `nccl_inspector` and `nccl_ras` collectors read them:

- Inspector: one textfile per GPU, rewritten every `INSPECTOR_WINDOW_S` with the window's mean bus bandwidth
  (bus bytes over the GPU time of the all-reduce kernels, waiting for peers included, as Inspector's
  `kernel_gpu` timing includes it). A window without an all-reduce (checkpoint, stall, hang) rewrites nothing.
- RAS: a loopback TCP port that speaks NCCL's RAS client protocol (`CLIENT PROTOCOL`, `SET FORMAT json`,
  `STATUS`) and answers with the job's one communicator; in the `hang` incident the hung rank stops
  answering RAS (unresponsive, never declared dead here).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from trainmon.simulation.incidents import HUNG_RANK, Plan

INSPECTOR_WINDOW_S = 10.0  # Inspector's default is 30 s and more (NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS)
INSPECTOR_VERSION = "v5.1"
COMM_NAME = "DP Group 0"
ALLREDUCE_CALLS = 25  # a step's gradient buckets (trainmon.demo.job)
NCCL_VERSION = "2.30.7"


class InspectorFiles:
    """Writes Inspector's textfile of each GPU under `directory` as the job's all-reduces go."""

    def __init__(self, directory: Path, uuids: Sequence[str], ranks: int, bucket_bytes: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._directory = directory
        self._uuids = list(uuids)
        self._ranks = ranks
        self._bucket = f"{bucket_bytes >> 20}-{(bucket_bytes >> 20) + 1}MB"
        self._clock = clock
        self._host = socket.gethostname()
        self._since = clock()
        self._bytes = [0] * len(self._uuids)
        self._seconds = [0.0] * len(self._uuids)
        self._calls = [0] * len(self._uuids)
        self._writes = 0
        directory.mkdir(parents=True, exist_ok=True)

    def advance(self, bus_bytes: Sequence[int], gpu_seconds: Sequence[float]) -> None:
        """Add one tick's all-reduces: per rank, the bytes each put on the bus and their kernels' GPU time."""
        for rank, (nbytes, seconds) in enumerate(zip(bus_bytes, gpu_seconds, strict=False)):
            if rank < len(self._uuids) and seconds > 0:
                self._bytes[rank] += nbytes
                self._seconds[rank] += seconds
                self._calls[rank] += ALLREDUCE_CALLS
        if self._clock() - self._since < INSPECTOR_WINDOW_S:
            return
        self._since = self._clock()
        for rank, uuid in enumerate(self._uuids):
            if self._calls[rank]:
                self._write(rank, uuid, self._bytes[rank] / self._seconds[rank] / 1e9,
                            self._seconds[rank] / self._calls[rank] * 1e6)
        self._bytes = [0] * len(self._uuids)
        self._seconds = [0.0] * len(self._uuids)
        self._calls = [0] * len(self._uuids)

    def _write(self, rank: int, uuid: str, busbw_gbs: float, exec_us: float) -> None:
        labels = (f'version="{INSPECTOR_VERSION}",slurm_job_id="unknown",node="{self._host}",gpu="GPU{rank}",'
                  f'comm_name="{COMM_NAME}",n_nodes="1",nranks="{self._ranks}",collective="AllReduce",'
                  f'message_size="{self._bucket}",algo_proto="RING_SIMPLE"')
        text = (f"nccl_bus_bandwidth_gbs{{{labels}}} {busbw_gbs:.3f}\n"
                f"nccl_collective_exec_time_microseconds{{{labels}}} {exec_us:.1f}\n")
        self._writes += 1
        staged = self._directory / f".staged-{self._writes}"
        staged.write_text(text)
        os.replace(staged, self._directory / f"nccl_inspector_metrics_{uuid.removeprefix('GPU-')}.prom")


class RasPort:
    """NCCL RAS's client port on 127.0.0.1 (a free port: several may run at once), speaking the protocol of
    NVIDIA/nccl `src/ras/client_support.cc` and answering STATUS with `answer()`.

    It misbehaves on request (the poller's tests): `chunk` bytes per send (partial reads), `delay` seconds
    before the answer (a slow RAS), `close_after_handshake` (NCCL gone mid-conversation). `commands` lists
    what clients sent.
    """

    def __init__(self, answer: Callable[[], bytes], chunk: int = 1 << 20, delay: float = 0.0,
                 close_after_handshake: bool = False) -> None:
        self._answer = answer
        self._chunk = chunk
        self._delay = delay
        self._close_after_handshake = close_after_handshake
        self.commands: list[str] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="trainmon-ras-port", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept() that close() alone would leave blocked
        self._server.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):  # the poller gave up first
                self._converse(conn)

    def _converse(self, conn: socket.socket) -> None:
        for raw in conn.makefile("rb"):
            command = raw.decode("utf-8", "replace").strip()
            self.commands.append(command)
            if command.upper().startswith("CLIENT PROTOCOL "):
                conn.sendall(b"SERVER PROTOCOL 2\n")
                if self._close_after_handshake:
                    return
            elif command.upper().startswith("SET FORMAT "):
                conn.sendall(b"OK\n")
            elif command.upper() in ("STATUS", "VERBOSE STATUS"):
                time.sleep(self._delay)
                answer = self._answer()
                for start in range(0, len(answer), self._chunk):
                    conn.sendall(answer[start:start + self._chunk])
                return  # NCCL closes the connection after the answer
            else:
                conn.sendall(f"ERROR: Unknown command {command}\n".encode())


class SimulatedRas:
    """The demo job's RAS: its one communicator, the hung rank unresponsive in the `hang` incident."""

    def __init__(self, ranks: int, plan: Plan) -> None:
        self._ranks = ranks
        self._plan = plan
        self._allreduces = 0  # each rank's, as RAS counts them per collective type
        self._port = RasPort(lambda: json.dumps(self.answer(), indent=2).encode())
        self.port = self._port.port

    def stop(self) -> None:
        self._port.stop()

    def advance(self, bus_bytes: Sequence[int]) -> None:
        """One tick of the job: a step's all-reduces where it put bytes on the bus."""
        if any(bus_bytes):
            self._allreduces += ALLREDUCE_CALLS

    def answer(self) -> dict[str, object]:
        """RAS's JSON STATUS (src/ras/client_support.cc) for the job's one communicator."""
        hung = self._plan.active("hang")
        count = self._allreduces
        present = [r for r in range(self._ranks) if not (hung and r == HUNG_RANK)]
        return {
            "nccl_version": NCCL_VERSION, "cuda_runtime_version": 12090, "cuda_driver_version": 13000,
            "timestamp": time.strftime("%Y-%m-%d %H:%M:%S"), "communicators_count": 1,
            "communicators": [{
                "hash": "0x5e1a7ed0d0e00000", "secondary_hash": "0x5e1a7e:0xd0e0", "size": self._ranks,
                "ranks_count": len(present), "missing_ranks_count": self._ranks - len(present),
                "ranks": [_rank(r, "ranks", count) for r in present],
                "missing_ranks": [_rank(HUNG_RANK, "missing", count)] if hung else [],
            }],
            "ras": {"collection_time_sec": 0.002, "timeouts_count": 0},
        }


def _rank(rank: int, listed: str, allreduces: int) -> dict[str, object]:
    entry: dict[str, object] = {"rank": rank, "host": "127.0.0.1", "pid": os.getpid(), "cuda_dev": rank,
                                "nvml_dev": rank}
    if listed == "missing":
        entry["status"] = {"unresponsive": True, "considered_dead": False}
        return entry
    entry["status"] = {"init_state": 0, "async_error": 0, "finalize_called": False, "destroy_flag": False,
                       "abort_flag": False}
    entry["collective_counts"] = {"Broadcast": allreduces // ALLREDUCE_CALLS, "Reduce": 0,
                                  "AllGather": 2 * allreduces // ALLREDUCE_CALLS, "ReduceScatter": 0,
                                  "AllReduce": allreduces}
    return entry


__all__ = ["INSPECTOR_WINDOW_S", "InspectorFiles", "RasPort", "SimulatedRas"]
