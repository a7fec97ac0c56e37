"""Compile fake_nvml.c into `<directory>/libnvidia-ml.so.1` (never committed: *.so is ignored)."""

from __future__ import annotations

import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
SONAME = "libnvidia-ml.so.1"


def build_fake_nvml(compiler: str, directory: Path, *defines: str) -> Path:
    """Build the fake and return its directory, ready for LD_LIBRARY_PATH.

    `defines` leave parts out: `WITHOUT_TEMPERATURE_V` builds a driver before R565.
    """
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
         *(f"-D{define}" for define in defines),
         f"-Wl,-soname,{SONAME}", "-o", str(directory / SONAME), str(SOURCE), "-lpthread"],
        check=True, capture_output=True, text=True,
    )
    return directory
