"""deploy/docker and deploy/compose, checked without a container engine.

The image is built and run in tests/setup/test_container_image.py; these tests prove the Dockerfile's
inputs exist and its final stage is unprivileged, and that the compose stack parses, mounts files that
exist, and hands Prometheus and Alertmanager configurations their own checkers accept.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.tools import require_tool

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "docker" / "Dockerfile"
COMPOSE_DIR = REPO / "deploy" / "compose"
COMPOSE = COMPOSE_DIR / "compose.yaml"
COMPILERS = ("gcc", "g++", "cc ", "clang", "build-essential", "make ")


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = dockerfile.read_text().replace("\\\n", " ")
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def final_stage(dockerfile: Path) -> list[tuple[str, str]]:
    steps = instructions(dockerfile)
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def bind_mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """(host path, container path) of each bind mount; named volumes are left out."""
    mounts = []
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts.append(((COMPOSE_DIR / source).resolve(), target))
    return mounts


def test_dockerfile_copy_sources_exist_and_pass_the_ignore_file() -> None:
    """Every COPY from the build context names a file or folder that exists and is not ignored."""
    ignore = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
    copies = [shlex.split(args) for word, args in instructions(DOCKERFILE) if word == "COPY"]
    sources = [s for args in copies if not any(a.startswith("--from") for a in args) for s in args[:-1]]

    assert sources
    for source in sources:
        assert (REPO / source).exists(), source
        assert f"!{source}" in ignore, source


def test_image_runs_trainmon_serve_unprivileged_without_compilers() -> None:
    """The final stage: slim base, non-root user, `trainmon serve`, nothing compiled or installed by apt."""
    stage = final_stage(DOCKERFILE)
    args = dict(instructions(DOCKERFILE))
    text = " ".join(rest for _, rest in stage)
    [script] = entry_points(group="console_scripts", name="trainmon")

    assert "slim" in args["ARG"]
    [user] = [rest for word, rest in stage if word == "USER"]
    assert user.split(":")[0] not in {"0", "root"}
    assert json.loads(dict(stage)["ENTRYPOINT"]) == ["trainmon"]
    assert json.loads(dict(stage)["CMD"]) == ["serve"]
    assert script.value == "trainmon.cli:main"
    assert "apt-get" not in text
    assert not any(compiler in text for compiler in COMPILERS)


def test_compose_services_and_files_exist(compose: dict[str, Any]) -> None:
    """The stack has its four services, builds the image from the Dockerfile, and mounts only files that exist."""
    services = compose["services"]
    build = services["trainmon"]["build"]

    assert set(services) == {"trainmon", "prometheus", "alertmanager", "grafana"}
    assert (COMPOSE_DIR / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    assert services["trainmon"]["command"][0] == "demo"
    for name, service in services.items():
        for source, _ in bind_mounts(service):
            assert source.exists(), f"{name}: {source}"
        for dependency in service.get("depends_on", []):
            assert dependency in services


def test_compose_prometheus_config_loads_the_shipped_rules(compose: dict[str, Any], tmp_path: Path) -> None:
    """Laid out as the container sees it, `promtool check config` accepts the config and both rule files."""
    promtool = require_tool("promtool")
    service = compose["services"]["prometheus"]
    for source, target in bind_mounts(service):
        shutil.copy(source, tmp_path / Path(target).name)
    config_flag = next(a for a in service["command"] if a.startswith("--config.file="))
    config = tmp_path / Path(config_flag.partition("=")[2]).name

    result = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "rules.yml" in result.stdout and "alerts.yml" in result.stdout
    scraped = yaml.safe_load(config.read_text())["scrape_configs"][0]
    assert scraped["job_name"] == "trainmon"
    assert scraped["static_configs"][0]["targets"] == ["trainmon:9842"]


def test_compose_alertmanager_config_passes_amtool(compose: dict[str, Any]) -> None:
    """The mounted Alertmanager configuration is valid."""
    amtool = require_tool("amtool")
    [(source, _)] = bind_mounts(compose["services"]["alertmanager"])

    result = subprocess.run([amtool, "check-config", str(source)], capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_grafana_provisions_the_datasource_and_the_dashboards(compose: dict[str, Any]) -> None:
    """The dashboard provider reads the folder the repository's dashboards are mounted at."""
    mounts = {target: source for source, target in bind_mounts(compose["services"]["grafana"])}
    provisioning = mounts["/etc/grafana/provisioning"]
    [provider] = yaml.safe_load((provisioning / "dashboards" / "trainmon.yml").read_text())["providers"]
    [datasource] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]

    assert mounts[provider["options"]["path"]] == REPO / "grafana" / "dashboards"
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"
    assert datasource["isDefault"] is True
