"""Running a test job (`tests.torch.gloo_job` and the others) as real processes, one per rank, forked from a
process that has imported torch (`tests.torch.zygote`)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.daemon import Daemon
from tests.helpers.net import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]


def start_job(
    mode: str,
    steps: int,
    out: Path,
    *,
    env: Mapping[str, str],
    ranks: int = 2,
    rank_env: Mapping[int, Mapping[str, str]] | None = None,
    module: str = "tests.torch.gloo_job",
) -> list[Rank]:
    """Start one process per rank of `module`, forked from this worker's zygote; `env` goes to all of them,
    `rank_env[r]` to rank r only."""
    out.mkdir(parents=True, exist_ok=True)
    port = str(free_port())
    procs = []
    for rank in range(ranks):
        full = inherited_environment()
        full.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(ranks),
                    LOCAL_RANK=str(rank), TRAINMON_REPORT_INTERVAL="0.1", OMP_NUM_THREADS="1")
        full.update(env)
        full.update((rank_env or {}).get(rank, {}))
        procs.append(zygote().start(module, [*([mode] if mode else []), str(steps), str(out)], full,
                                    out / f"rank-{rank}.log"))
    return procs


def inherited_environment() -> dict[str, str]:
    """This process's environment less any trainmon or test-job setting: a rank gets only the ones it is given."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("TRAINMON_", "JOB_"))}


class Zygote:
    """Client of `tests.torch.zygote`: one per pytest worker, started with its first job and ended with it."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "tests.torch.zygote"], cwd=REPO,
                                        env={**inherited_environment(), "OMP_NUM_THREADS": "1"}, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)
        self.lock = threading.Lock()
        self.forked: queue.Queue[int] = queue.Queue()
        self.exited: dict[int, int] = {}
        self.changed = threading.Condition()
        threading.Thread(target=self.read, name="zygote replies", daemon=True).start()
        atexit.register(self.close)

    def start(self, module: str, args: list[str], env: Mapping[str, str], log: Path) -> Rank:
        request = {"module": module, "args": args, "env": dict(env), "cwd": str(REPO), "log": str(log)}
        with self.lock:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()
            return Rank(self.forked.get(timeout=60), self)

    def close(self) -> None:
        """End the zygote (and any rank still running) and reap it, so its CPU counts as this process's children's."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message = json.loads(line)
            if "forked" in message:
                self.forked.put(message["forked"])
            else:
                with self.changed:
                    self.exited[message["exited"]] = message["code"]
                    self.changed.notify_all()


def zygote() -> Zygote:
    global _zygote
    if _zygote is None or _zygote.process.poll() is not None:
        _zygote = Zygote()
    return _zygote


_zygote: Zygote | None = None


class Rank:
    """One forked rank, waited for like a `subprocess.Popen` (the zygote is its parent and reports its end)."""

    def __init__(self, pid: int, parent: Zygote) -> None:
        self.pid = pid
        self.parent = parent
        self.returncode: int | None = None

    def poll(self) -> int | None:
        with self.parent.changed:
            self.returncode = self.parent.exited.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self.parent.changed:
            if not self.parent.changed.wait_for(lambda: self.pid in self.parent.exited, timeout):
                raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout or 0)
            self.returncode = self.parent.exited[self.pid]
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:  # not reaped by the zygote yet, so the pid is still this rank's
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def finish(procs: list[Rank], out: Path, timeout: float = 120) -> None:
    for rank, proc in enumerate(procs):
        code = proc.wait(timeout=timeout)
        assert code == 0, (out / f"rank-{rank}.log").read_text()


def stop(jobs: Iterable[tuple[Path, list[Rank]]], timeout: float = 60) -> None:
    """Stop jobs started to run until told (steps 0): each gets its `stop` file, then each rank is waited for, and
    killed past `timeout`."""
    jobs = list(jobs)
    for out, _ in jobs:
        (out / "stop").touch()
    for _, processes in jobs:
        for proc in processes:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()


def run_job(mode: str, steps: int, out: Path, *, env: Mapping[str, str],
            rank_env: Mapping[int, Mapping[str, str]] | None = None, ranks: int = 2,
            module: str = "tests.torch.gloo_job") -> None:
    finish(start_job(mode, steps, out, env=env, rank_env=rank_env, ranks=ranks, module=module), out)


def samples(text: str, name: str, **match: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Samples called `name` whose labels include `match`, keyed by their sorted labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in match.items()):
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def per_rank(text: str, name: str, job_id: str, **match: str) -> dict[int, float]:
    """`name` summed per rank of `job_id` (over op/group labels)."""
    out: dict[int, float] = {}
    for labels, value in samples(text, name, job_id=job_id, **match).items():
        rank = int(dict(labels)["rank"])
        out[rank] = out.get(rank, 0.0) + value
    return out


def metrics_when(daemon: Daemon, condition: Callable[[str], bool], timeout: float = 90) -> str:
    """The daemon's metrics text, once `condition` holds for it."""

    def check() -> str | None:
        text = daemon.metrics_text()
        return text if condition(text) else None

    return str(wait_until(check, timeout=timeout))
