"""Where `trainmon demo` keeps its simulated node: a per-user directory that the next start sweeps.

A run's tree lives in `<base>/<random>/`, `<base>` being `$XDG_RUNTIME_DIR/trainmon-demo` (per user,
emptied at logout) or else `<tmp>/trainmon-demo-<uid>`, made mode 0700 and refused when another user
owns it or it is a link. Each run holds an exclusive `flock` on its own `.lock` for as long as it
lives; the kernel drops it however the process ends, SIGKILL included. Every start removes the trees
whose lock it can take (their run is gone), and a clean stop removes its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from trainmon.errors import ConfigError

LOCK = ".lock"


def demo_base() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "trainmon-demo"
    return Path(tempfile.gettempdir()) / f"trainmon-demo-{os.getuid()}"


def _own_directory(base: Path) -> None:
    """Make `base` (0700) or check that this user owns it; in a shared /tmp anyone could have made it first."""
    base.mkdir(mode=0o700, exist_ok=True)
    info = base.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise ConfigError("demo", str(base), "not a directory of this user: remove it, or set XDG_RUNTIME_DIR")


def _locked(path: Path, *, wait: bool) -> IO[str] | None:
    """`path` opened and flock'ed exclusively; None when another process holds it (`wait` false)."""
    handle = open(path, "a")  # noqa: SIM115  (held open for the lock's lifetime)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        handle.close()
        return None
    return handle


def sweep(base: Path) -> list[Path]:
    """Remove the trees under `base` whose run is gone (their lock is free); returns them."""
    swept = []
    for tree in sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink()):
        if not (tree / LOCK).is_file():
            continue  # a run between making its directory and taking its lock
        lock = _locked(tree / LOCK, wait=False)
        if lock is None:
            continue
        with lock:
            shutil.rmtree(tree, ignore_errors=True)
        swept.append(tree)
    return swept


@contextmanager
def runtime_directory() -> Iterator[Path]:
    """A fresh directory for one demo run, after sweeping what killed runs left behind."""
    base = demo_base()
    _own_directory(base)
    sweep(base)
    tree = Path(tempfile.mkdtemp(dir=base))
    lock = _locked(tree / LOCK, wait=True)
    assert lock is not None
    try:
        yield tree
    finally:
        shutil.rmtree(tree, ignore_errors=True)
        lock.close()
        with contextlib.suppress(OSError):
            base.rmdir()  # the last run out tidies the base too
