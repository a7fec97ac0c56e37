from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from filelock import FileLock

from tests.helpers.tools import require, require_tool
from tests.setup.debian import COLD_BUILD_TIMEOUT_S, apt_source_files, debian_mirror, debootstrap


@pytest.fixture(scope="session")
def minbase_tarball(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A fresh Debian 12 (`debootstrap --variant=minbase bookworm`) from the mirror apt is configured with,
    as a tarball each test unpacks its own copy of. Built anew every run, so it cannot go stale, and once
    per run: under xdist the first worker to ask builds it under a file lock in the run's shared temp dir."""
    require(os.geteuid() == 0, "debootstrap and chroot need root")
    for tool in ("debootstrap", "unshare", "chroot", "git", "tar"):
        require_tool(tool)
    base = tmp_path_factory.getbasetemp()
    tarball = (base if worker_id == "master" else base.parent) / "minbase.tar"
    with FileLock(f"{tarball}.lock", timeout=COLD_BUILD_TIMEOUT_S):
        if not tarball.exists():
            _build_minbase(tarball, tmp_path_factory.mktemp("minbase") / "rootfs")
    return tarball


def _build_minbase(tarball: Path, rootfs: Path) -> None:
    mirror = debian_mirror(apt_source_files(Path("/etc/apt")))
    started = time.monotonic()
    debootstrap(rootfs, mirror)
    partial = tarball.with_suffix(".partial")  # a build that fails half-way leaves no tarball to reuse
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True, timeout=300)
    subprocess.run(["rm", "-rf", "--one-file-system", str(rootfs)], check=True, timeout=300)
    partial.rename(tarball)
    print(f"\ndebootstrap --variant=minbase bookworm from {mirror}: {time.monotonic() - started:.0f} s")
