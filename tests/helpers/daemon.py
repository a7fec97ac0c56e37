"""A real `trainmon serve` process on loopback, for tests that talk HTTP to it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.helpers.net import free_port, wait_until


@dataclass
class Daemon:
    """A started daemon; `stop()` sends SIGTERM and returns the exit code."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    scheme: str = "http"
    _stopped: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def get(self, path: str, **kwargs: object) -> httpx.Response:
        return httpx.get(self.url + path, timeout=10, **kwargs)  # type: ignore[arg-type]

    def metrics_text(self) -> str:
        return self.get("/metrics", headers={"Accept": "text/plain"}).text

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def proc_status(self, field: str) -> int:
        """A number from /proc/<pid>/status: `Threads`, or `VmRSS` in kB."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == field:
                return int(value.split()[0])
        raise KeyError(field)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        if self._stopped:
            return self.process.returncode
        self._stopped = True
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_daemon(
    tmp_path: Path,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    command: str = "serve",
    wait_ready: bool = True,
    port: int | None = None,
    scheme: str = "http",
    client: Mapping[str, object] | None = None,
    wrapper: Sequence[str] = (),
    ready_timeout: float = 60.0,
) -> Daemon:
    """Start `python -m trainmon <command> --listen 127.0.0.1:<port> *args` and wait until it serves.

    The ingest socket and the state directory default to ones under `tmp_path` so tests never touch /run
    or /var/lib (nor share a health history). `client` holds the
    httpx options (`verify`, `auth`) the readiness probe needs behind TLS or basic auth. `wrapper` is
    a command that execs the daemon, such as `prlimit --nofile=1024:1024`.
    """
    port = port or free_port()
    argv = [*wrapper, sys.executable, "-m", "trainmon", command, "--listen", f"127.0.0.1:{port}"]
    if command == "serve" and not any(a.startswith("--ingest-socket") for a in args):
        argv += ["--ingest-socket", str(tmp_path / "ingest.sock")]
    if command == "serve" and "--state-dir" not in args:
        argv += ["--state-dir", str(tmp_path / "state")]
    argv += list(args)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_")}
    full_env.update(env or {})
    log_path = tmp_path / f"daemon-{port}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    daemon = Daemon(process=process, port=port, log_path=log_path, scheme=scheme)

    def serving_or_exited() -> bool:
        if process.poll() is not None:
            return True
        path = "/readyz" if wait_ready else "/healthz"
        return httpx.get(daemon.url + path, timeout=2, **(client or {})).status_code == 200  # type: ignore[arg-type]

    try:
        wait_until(serving_or_exited, timeout=ready_timeout)
        if process.poll() is not None:
            raise AssertionError(f"daemon exited with {process.returncode}:\n{daemon.log()}")
    except BaseException:
        daemon.stop()
        raise
    return daemon
