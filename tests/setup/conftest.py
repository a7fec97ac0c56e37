from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.tools import require, require_tool
from tests.setup.debian import apt_source_files, debian_mirror, debootstrap


@pytest.fixture(scope="session")
def minbase_tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh Debian 12 (`debootstrap --variant=minbase bookworm`) from the mirror apt is configured with,
    as a tarball each test unpacks its own copy of. Built anew every session, so it cannot go stale."""
    require(os.geteuid() == 0, "debootstrap and chroot need root")
    for tool in ("debootstrap", "unshare", "chroot", "git", "tar"):
        require_tool(tool)
    mirror = debian_mirror(apt_source_files(Path("/etc/apt")))
    work = tmp_path_factory.mktemp("minbase")
    rootfs = work / "rootfs"
    started = time.monotonic()
    debootstrap(rootfs, mirror)
    tarball = work / "minbase.tar"
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True, timeout=300)
    subprocess.run(["rm", "-rf", "--one-file-system", str(rootfs)], check=True, timeout=300)
    print(f"\ndebootstrap --variant=minbase bookworm from {mirror}: {time.monotonic() - started:.0f} s")
    return tarball

