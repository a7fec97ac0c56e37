"""Running the test job (`tests.torch.gloo_job`) as real processes, one per rank."""

from __future__ import annotations

import os
import subprocess
import sys
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
) -> list[subprocess.Popen[bytes]]:
    """Start one process per rank of `module`; `env` goes to all of them, `rank_env[r]` to rank r only."""
    out.mkdir(parents=True, exist_ok=True)
    port = str(free_port())
    procs = []
    for rank in range(ranks):
        full = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINMON_", "JOB_"))}
        full.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(ranks),
                    LOCAL_RANK=str(rank), TRAINMON_REPORT_INTERVAL="0.1", OMP_NUM_THREADS="1")
        full.update(env)
        full.update((rank_env or {}).get(rank, {}))
        with open(out / f"rank-{rank}.log", "wb") as log:  # the child keeps its own copy of the descriptor
            procs.append(subprocess.Popen(
                [sys.executable, "-m", module, *([mode] if mode else []), str(steps), str(out)],
                cwd=REPO, env=full, stdout=log, stderr=subprocess.STDOUT))
    return procs


def finish(procs: list[subprocess.Popen[bytes]], out: Path, timeout: float = 120) -> None:
    for rank, proc in enumerate(procs):
        code = proc.wait(timeout=timeout)
        assert code == 0, (out / f"rank-{rank}.log").read_text()


def stop(jobs: Iterable[tuple[Path, list[subprocess.Popen[bytes]]]], timeout: float = 60) -> None:
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
