"""The health history's file under `--state-dir`: read at start, rewritten atomically when it changes.

A missing file is a first start. A corrupt, oversized, unreadable or non-regular one (a FIFO must not
block the start) is reported and treated as empty (it is replaced at the next change), never fatal; it
is read like a kernel attribute (`trainmon.roots.read_attribute`). A directory that cannot be made or
written, or a write that fails (a full disk), leaves the history in memory only and says so, and the
write is tried again with back-off until it succeeds. An unreadable boot id, without which a reboot
cannot be told from a daemon restart, keeps it in memory for good. `trainmon check` reads the file but
never writes it.
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainmon.health.history import GpuHistory, decode, encode
from trainmon.nvml.backoff import Backoff
from trainmon.roots import Unavailable, read_attribute

log = logging.getLogger(__name__)

FILE_NAME = "health.json"
MAX_BYTES = 1 << 20  # MAX_GPUS histories are far smaller; anything larger is not ours
BOOT_ID = Path("sys/kernel/random/boot_id")
RETRY_SECONDS = 10.0  # the first retry of a failed write; each failure doubles it up to MAX_RETRY_SECONDS
MAX_RETRY_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class StateStatus:
    """Where the history lives; `problem` says why it is in memory only or why the file was not read."""

    path: str
    persistent: bool
    problem: str


def read_boot_id(procfs: Path) -> str | None:
    """The kernel's id of this boot (a new one at every boot); None where procfs does not have it."""
    try:
        text = (procfs / BOOT_ID).read_text().strip()
    except OSError:
        return None
    return text or None


class StateFile:
    """`directory` None: in memory only. `read_only` (`trainmon check`): load, check writability, never write.

    `clock` (monotonic seconds) paces the retries of a failed write.
    """

    def __init__(self, directory: Path | None, *, read_only: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._path = directory / FILE_NAME if directory is not None else None
        self._read_only = read_only
        self._clock = clock
        self._unusable = "" if directory is not None else "--state-dir is empty"
        self._unwritable = ""  # why the last write failed; cleared by the next that succeeds
        self._unread = ""
        self._backoff = Backoff(initial=RETRY_SECONDS, maximum=MAX_RETRY_SECONDS)
        self._unsaved: Mapping[str, GpuHistory] | None = None

    def disable(self, why: str) -> None:
        self._unusable = why

    def status(self) -> StateStatus:
        problem = "; ".join(p for p in (self._unusable, self._unwritable, self._unread) if p)
        return StateStatus(path=str(self._path or ""), persistent=not (self._unusable or self._unwritable),
                           problem=problem)

    def load(self) -> dict[str, GpuHistory]:
        """The saved histories; {} on a first start, or (reported) when the file cannot be used."""
        if self._path is None or self._unusable:
            return {}
        self._prepare_directory(self._path.parent)
        try:
            text = read_attribute(self._path, MAX_BYTES)
            if isinstance(text, Unavailable):
                if text.missing:
                    return {}
                raise ValueError(text.why)
            return decode(text)
        except (OSError, ValueError, RecursionError) as exc:
            reason = _reason(exc)
            self._unread = f"{self._path} unreadable at start, treated as empty and replaced ({reason})"
            log.warning("health state: %s", self._unread)
            return {}

    def save(self, gpus: Mapping[str, GpuHistory]) -> None:
        """Replace the file with `gpus` now or, after a failed write, at the next try the back-off allows."""
        if self._path is None or self._unusable or self._read_only:
            return
        self._unsaved = gpus
        self.flush()

    def flush(self) -> None:
        """Write what a failed save left unwritten, once the back-off allows (call it every cycle)."""
        if self._path is None or self._unsaved is None or not self._backoff.ready(self._clock()):
            return
        try:
            self._path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
            self._replace(self._path, encode(self._unsaved))
        except OSError as exc:
            self._refuse(self._path.parent, exc)
            return
        self._unsaved = None
        self._backoff.succeeded()
        if self._unwritable:
            log.info("health state written again: %s", self._path)
            self._unwritable = ""

    @staticmethod
    def _replace(path: Path, text: str) -> None:
        """At once: a crash leaves the old file or the new one, never half of one."""
        fd, temporary = tempfile.mkstemp(prefix=f".{FILE_NAME}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def _prepare_directory(self, directory: Path) -> None:
        """Make it (serve); where it cannot be written, the history stays in memory (the file is still read)."""
        try:
            if not self._read_only:
                directory.mkdir(mode=0o750, parents=True, exist_ok=True)
            elif not directory.is_dir():
                raise FileNotFoundError(errno.ENOENT, "not a directory (trainmon serve makes it)")
            if not os.access(directory, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        except OSError as exc:
            self._refuse(directory, exc)

    def _refuse(self, directory: Path, exc: OSError) -> None:
        self._backoff.failed(self._clock())
        retry = "" if self._read_only else f"; retried with back-off, at most {MAX_RETRY_SECONDS:.0f} s apart"
        why = (f"{directory}: {exc.strerror or exc} (escalation after a reboot or a daemon restart needs a "
               f"writable --state-dir{retry})")
        if not self._unwritable:
            log.warning("health state in memory only: %s", why)
        self._unwritable = why


def _reason(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
