"""Compile fake_nvml.c into `<directory>/libnvidia-ml.so.1` (never committed: *.so is ignored)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from filelock import FileLock

SOURCE = Path(__file__).with_name("fake_nvml.c")
SONAME = "libnvidia-ml.so.1"


def build_fake_nvml(compiler: str, directory: Path, *defines: str) -> Path:
    """Build the fake and return its directory, ready for LD_LIBRARY_PATH.

    `defines` leave parts out: `WITHOUT_TEMPERATURE_V` builds a driver before R565.
    Each build of the same source, defines and compiler is compiled once and copied: the suite asks for the
    fake some thirty times (each worker's fixtures, the benchmarks' nodes), half a core-second of gcc each.
    """
    argv = [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
            *(f"-D{define}" for define in defines), f"-Wl,-soname,{SONAME}"]
    compiled = compiled_once(argv)
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy2(compiled, directory / SONAME)
    return directory


def compiled_once(argv: list[str]) -> Path:
    """The library `argv` makes of SOURCE, in a cache of this user's named by everything it depends on."""
    compiler = Path(shutil.which(argv[0]) or argv[0]).resolve()
    key = hashlib.sha256("\0".join([*argv, str(compiler), str(compiler.stat().st_mtime_ns)]).encode()
                         + SOURCE.read_bytes()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"trainmon-fake-nvml-{os.geteuid()}"
    cache.mkdir(mode=0o700, exist_ok=True)
    if cache.stat().st_uid != os.geteuid() or cache.stat().st_mode & 0o077:
        raise RuntimeError(f"{cache} is not this user's own directory")
    library = cache / f"{key}.so"
    with FileLock(f"{library}.lock"):
        if not library.exists():
            partial = cache / f"{key}.partial.so"
            subprocess.run([*argv, "-o", str(partial), str(SOURCE), "-lpthread"], check=True, capture_output=True,
                           text=True)
            partial.rename(library)
    return library
