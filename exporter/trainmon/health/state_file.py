"""The health history's file under `--state-dir`: read at start, rewritten atomically when it changes.

A missing file is a first start. A corrupt, oversized or unreadable one is reported and treated as
empty (it is replaced at the next change), never fatal. A directory that cannot be made or written
leaves the history in memory only, and says so; so does an unreadable boot id, without which a reboot
cannot be told from a daemon restart. `trainmon check` reads the file but never writes it.
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainmon.health.history import GpuHistory, decode, encode

log = logging.getLogger(__name__)

FILE_NAME = "health.json"
MAX_BYTES = 1 << 20  # MAX_GPUS histories are far smaller; anything larger is not ours
BOOT_ID = Path("sys/kernel/random/boot_id")


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
    """`directory` None: in memory only. `read_only` (`trainmon check`): load, check writability, never write."""

    def __init__(self, directory: Path | None, *, read_only: bool = False) -> None:
        self._path = directory / FILE_NAME if directory is not None else None
        self._read_only = read_only
        self._unusable = "" if directory is not None else "--state-dir is empty"
        self._unread = ""

    def disable(self, why: str) -> None:
        self._unusable = why

    def status(self) -> StateStatus:
        problem = "; ".join(p for p in (self._unusable, self._unread) if p)
        return StateStatus(path=str(self._path or ""), persistent=not self._unusable, problem=problem)

    def load(self) -> dict[str, GpuHistory]:
        """The saved histories; {} on a first start, or (reported) when the file cannot be used."""
        if self._path is None or self._unusable:
            return {}
        self._prepare_directory(self._path.parent)
        try:
            with open(self._path, "rb") as file:
                data = file.read(MAX_BYTES + 1)
            if len(data) > MAX_BYTES:
                raise ValueError(f"larger than {MAX_BYTES} bytes")
            return decode(data.decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self._unread = f"{self._path} unreadable at start, treated as empty and replaced ({reason})"
            log.warning("health state: %s", self._unread)
            return {}

    def save(self, gpus: Mapping[str, GpuHistory]) -> None:
        """Replace the file at once (a crash leaves the old or the new one, never half of one)."""
        if self._path is None or self._unusable or self._read_only:
            return
        try:
            fd, temporary = tempfile.mkstemp(prefix=f".{FILE_NAME}.", dir=self._path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as file:
                    file.write(encode(gpus))
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temporary, self._path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except OSError as exc:
            self._refuse(self._path.parent, exc)

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
        self._unusable = (f"{directory}: {exc.strerror or exc} (escalation after a reboot or a daemon restart "
                          f"needs a writable --state-dir)")
        log.warning("health state in memory only: %s", self._unusable)
