"""GPFS mounts' counters from `mmpmon -p -s` (`fs_io_s`), run in the background, never on the scrape path.

mmpmon needs root and can take seconds on a busy cluster: a thread runs it every period with a
timeout shorter than the period, so runs never pile up, and the collector serves the latest answer.
A mount is matched to its `_fs_` line by its mountinfo source (the device name, `/dev/` stripped).
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from trainmon.errors import error_line
from trainmon.fsclients import ClientReading, FsCounters
from trainmon.parsers.mmpmon import FsIoAnswer, GpfsIo, parse_fs_io_s

REQUEST = "fs_io_s\n"
OUTPUT_BYTES = 1 << 20
STALE_AFTER_PERIODS = 3
GPFS_OPERATIONS = {"_rdc_": "read", "_wc_": "write", "_oc_": "open", "_cc_": "close", "_dir_": "readdir"}


@dataclass(frozen=True, slots=True)
class MmpmonAnswer:
    """One run: its parsed answer, or why there is none, and when it finished (time.time())."""

    answer: FsIoAnswer | None
    error: str | None
    at: float


def run_mmpmon(path: Path, timeout: float) -> MmpmonAnswer:
    try:
        done = subprocess.run([str(path), "-p", "-s"], input=REQUEST, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return MmpmonAnswer(None, f"{path} did not answer within {timeout:g}s", time.time())
    except OSError as exc:
        return MmpmonAnswer(None, f"{path}: {error_line(exc)} (--gpfs-mmpmon)", time.time())
    if done.returncode != 0:
        return MmpmonAnswer(None, f"{path} exited {done.returncode}: {done.stderr.strip()[:120]}", time.time())
    if len(done.stdout) > OUTPUT_BYTES:
        return MmpmonAnswer(None, f"{path} printed over {OUTPUT_BYTES} bytes", time.time())
    return MmpmonAnswer(parse_fs_io_s(done.stdout), None, time.time())


class MmpmonPoller:
    """Runs mmpmon every `period` seconds in a daemon thread; `latest` is the last run's answer."""

    def __init__(self, path: Path, period: float) -> None:
        self.path = path
        self._period = period
        self._timeout = period / 2
        self.latest: MmpmonAnswer | None = None
        self._answered = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mmpmon", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self.latest = run_mmpmon(self.path, self._timeout)
            self._answered.set()
            if self._stop.wait(self._period):
                return

    def wait_first(self, timeout: float) -> None:
        self._answered.wait(timeout)

    def close(self) -> None:
        self._stop.set()

    def reading(self, mount_point: str, source: str) -> ClientReading:
        latest = self.latest
        if latest is None:
            return ClientReading(None, (f"{mount_point}: no answer from {self.path} yet",))
        if latest.error is not None or latest.answer is None:
            return ClientReading(None, (f"{mount_point}: {latest.error}",))
        if time.time() - latest.at > STALE_AFTER_PERIODS * self._period:
            return ClientReading(None, (f"{mount_point}: the last mmpmon answer is stale: the poller is stuck",))
        name = source.removeprefix("/dev/")
        record = latest.answer.records.get(name)
        notes = tuple(f"{mount_point}: {note}" for note in latest.answer.skipped)
        if record is None:
            return ClientReading(None, (*notes, f"{mount_point}: no _fs_ {name} in mmpmon's answer"))
        return ClientReading(gpfs_counters(record), notes, found=f"mmpmon _fs_ {name}")


def gpfs_counters(record: GpfsIo) -> FsCounters:
    values = record.counters
    return FsCounters(read_bytes=values["_br_"], written_bytes=values["_bw_"],
                      operations={op: values[key] for key, op in GPFS_OPERATIONS.items()})
