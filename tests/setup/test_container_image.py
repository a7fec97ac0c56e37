"""deploy/docker/Dockerfile, built for real with buildah and run as uid 10001.

No container registry is reachable, so the base image is made here: the session's fresh Debian 12
(debootstrap) imported with podman, plus python3-venv, standing in for `python:3.12-slim-bookworm`.
buildah runs the steps with `--isolation chroot`: this machine's OCI runtime (crun) cannot start
containers here (`setrlimit RLIMIT_NOFILE: Operation not permitted`), a chroot needs no runtime.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.tools import require_tool
from tests.setup.debian import COLD_BUILD_TIMEOUT_S, git_archive_into, host_pip_files
from trainmon import __version__

pytestmark = [pytest.mark.slow, pytest.mark.timeout(COLD_BUILD_TIMEOUT_S)]

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = "deploy/docker/Dockerfile"
PYTHON_BASE = "FROM {minbase}\nRUN apt-get update && apt-get install -y --no-install-recommends python3-venv \\\n" \
              "    && rm -rf /var/lib/apt/lists/*\n"


def run(*argv: str | Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{argv}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


@pytest.fixture(scope="module")
def image(minbase_tarball: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The trainmon image, built from a clean copy of the checkout on a locally made Debian 12 Python base."""
    podman, buildah = require_tool("podman"), require_tool("buildah")
    tag = uuid.uuid4().hex[:12]
    minbase, python_base, trainmon = (f"localhost/trainmon-test-{n}:{tag}" for n in ("minbase", "python", "image"))
    work = tmp_path_factory.mktemp("image")
    context = work / "context"
    git_archive_into(REPO, context)
    (work / "Containerfile.python").write_text(PYTHON_BASE.format(minbase=minbase))
    # pip inside the build reaches the package index the way this machine's pip does (a proxy's CA, say).
    pip_volumes = [f"--volume={p}:{p}:ro" for p in host_pip_files(os.environ, Path.home())]
    try:
        started = time.monotonic()
        run(podman, "import", minbase_tarball, minbase)
        run(buildah, "bud", "--isolation=chroot", "--pull-never", "-f", work / "Containerfile.python",
            "-t", python_base, work)
        based = time.monotonic()
        run(buildah, "bud", "--isolation=chroot", "--pull-never", *pip_volumes,
            f"--build-arg=PYTHON_IMAGE={python_base}", "-f", context / DOCKERFILE, "-t", trainmon, context)
        print(f"\nPython base image (import + python3-venv): {based - started:.0f} s; "
              f"{DOCKERFILE} build: {time.monotonic() - based:.0f} s")
        yield trainmon
    finally:
        subprocess.run([podman, "rmi", "--force", trainmon, python_base, minbase], capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[str]:
    buildah = require_tool("buildah")
    name = run(buildah, "from", "--pull-never", image).stdout.strip()
    try:
        yield name
    finally:
        subprocess.run([buildah, "rm", name], capture_output=True, timeout=120)


def in_container(container: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`argv` in the container as uid/gid 10001, found on the image's PATH like its ENTRYPOINT."""
    return subprocess.run([require_tool("buildah"), "run", "--isolation=chroot", "--user=10001:10001", container,
                           "--", *argv], capture_output=True, text=True, timeout=300)


def test_image_config_runs_trainmon_serve_as_10001(image: str) -> None:
    [inspected] = json.loads(run(require_tool("podman"), "image", "inspect", image).stdout)
    config = inspected["Config"]

    assert "10001:10001" == config["User"]
    assert ["trainmon"] == config["Entrypoint"]
    assert ["serve"] == config["Cmd"]


def test_trainmon_version_in_the_image(container: str) -> None:
    result = in_container(container, "sh", "-c", "id -u; trainmon version")

    assert 0 == result.returncode, result.stderr
    assert ["10001", f"trainmon {__version__}"] == result.stdout.split("\n")[:2]


def test_trainmon_check_in_the_image_reports_every_collector(container: str) -> None:
    """No GPU here (no NVIDIA device node, none on the PCI bus, no NVML library): `check` reports the gpu
    collector as NO_DATA, not failing, beside the others, and exits 0."""
    result = in_container(container, "trainmon", "check")
    states = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines() if line[:1].isalpha()}

    assert 0 == result.returncode, result.stdout + result.stderr
    assert "NO_DATA" == states.pop("gpu"), result.stdout
    assert {"nvme", "infiniband", "aer", "fs", "training"} == set(states), result.stdout
