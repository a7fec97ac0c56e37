"""`--profile fleet` drops families and keeps every series the shipped alerts, rules and Fleet dashboard read."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml

from tests.fake_nvml.build import build_fake_nvml
from tests.helpers.daemon import start_daemon
from tests.helpers.node import SyntheticNode, served_with_ranks
from tests.helpers.tools import require_tool
from trainmon.catalog import BY_SOURCE, FAMILIES, Family, gpu, training, undeclared
from trainmon.profiles import FLEET

REPO = Path(__file__).resolve().parents[1]
NAME = re.compile(r"[A-Za-z_:][\w:]*")
SERIES = {series: family for family in FAMILIES for series in family.series}
ANNOTATION_QUERY = re.compile(r"printf `([^`]*)`")  # {{ range printf `QUERY` … | query }} in a description
RANKS = 8
GPUS = SyntheticNode.gpus


def recording_rules() -> dict[str, str]:
    """Each recorded name of prometheus/rules.yml and its expressions, joined."""
    records: dict[str, str] = {}
    for group in yaml.safe_load((REPO / "prometheus" / "rules.yml").read_text())["groups"]:
        for rule in group["rules"]:
            records[rule["record"]] = records.get(rule["record"], "") + "\n" + rule["expr"]
    return records


def fleet_sources() -> list[str]:
    """Every PromQL expression the fleet tier evaluates: prometheus/alerts.yml (with the queries its
    annotations run when an alert is sent), the Fleet dashboard, and the recording rules they read, directly
    or through other recording rules."""
    rules = [rule for group in yaml.safe_load((REPO / "prometheus" / "alerts.yml").read_text())["groups"]
             for rule in group["rules"]]
    exprs = [rule["expr"] for rule in rules]
    exprs += [query for rule in rules for text in rule.get("annotations", {}).values()
              for query in ANNOTATION_QUERY.findall(text)]
    board = json.loads((REPO / "grafana" / "dashboards" / "trainmon-fleet.json").read_text())
    panels = [p for top in board["panels"] for p in (top, *top.get("panels", []))]
    exprs += [t["expr"] for p in panels for t in p.get("targets", [])]
    records, read = recording_rules(), set()
    pending = [name for expr in exprs for name in NAME.findall(expr) if name in records]
    while pending:
        name = pending.pop()
        if name not in read:
            read.add(name)
            pending += [found for found in NAME.findall(records[name]) if found in records]
    return exprs + [records[name] for name in sorted(read)]


def used_series() -> set[str]:
    """The raw trainmon series (sample names) the fleet tier reads; recorded names contain `:`."""
    return {name for expr in fleet_sources() for name in NAME.findall(expr) if name.startswith("trainmon_")}


def families_in(exprs: Iterable[str]) -> set[Family]:
    """The catalogue's families whose series `exprs` name."""
    return {SERIES[name] for expr in exprs for name in NAME.findall(expr) if name in SERIES}


def sample_names(text: str) -> list[str]:
    return [line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")]


def served(tmp_path: Path, profile: str) -> str:
    root = tmp_path / profile
    node = SyntheticNode(root)
    nvml = build_fake_nvml(require_tool("gcc", "cc"), root / "nvml")
    socket_path = root / "ingest.sock"
    daemon = start_daemon(root, [*node.daemon_args(socket_path, 1.0), "--profile", profile],
                          env=node.daemon_env(nvml))
    try:
        return served_with_ranks(daemon, socket_path, RANKS)
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def expositions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("profiles")
    return {profile: served(tmp, profile) for profile in ("full", "fleet")}


def test_the_fleet_profile_keeps_every_family_the_fleet_tier_reads() -> None:
    """Static: the alerts, the queries their descriptions run, the Fleet dashboard and the recording rules they
    read name only declared families, and each of those is in the fleet profile."""
    sources = fleet_sources()
    read = families_in(sources)

    assert [] == undeclared(sources)
    assert gpu.GPU_SM_UTILIZATION_RATIO in read  # the derivation found the rules' series
    assert training.TRAIN_COMM_WAIT_SECONDS_TOTAL in read  # ... and those behind chained recording rules
    assert [] == sorted(family.name for family in read - set(FLEET))


def test_the_fleet_profile_lists_served_catalogue_families_once() -> None:
    served = set(FAMILIES) - set(BY_SOURCE["rules"])  # what Prometheus records is on no node's /metrics

    assert len(FLEET) == len(set(FLEET))
    assert [] == [family.name for family in FLEET if family not in served]


def test_the_fleet_profile_serves_every_used_series_the_full_profile_serves(expositions: dict[str, str]) -> None:
    full, fleet = set(sample_names(expositions["full"])), set(sample_names(expositions["fleet"]))

    assert (full & used_series()) - fleet == set()
    assert {"trainmon_train_step_duration_seconds_count", "trainmon_gpu_info", "trainmon_build_info"} <= fleet


def test_the_fleet_profile_serves_the_step_time_histogram_without_its_buckets(expositions: dict[str, str]) -> None:
    fleet = expositions["fleet"]

    assert "trainmon_train_step_duration_seconds_bucket" in expositions["full"]
    assert "trainmon_train_step_duration_seconds_bucket" not in fleet
    assert RANKS == sample_names(fleet).count("trainmon_train_step_duration_seconds_sum")
    assert "# TYPE trainmon_train_step_duration_seconds summary" in fleet


def test_the_fleet_profile_drops_what_the_fleet_tier_does_not_read(expositions: dict[str, str]) -> None:
    fleet = sample_names(expositions["fleet"])

    assert "trainmon_gpu_clocks_event_active" not in fleet
    assert "trainmon_nvme_discards_completed_total" not in fleet
    assert len(fleet) < len(sample_names(expositions["full"])) / 2
    # the fleet tier's budget for 8 GPUs, 16 NVMe, 8 ports and 8 ranks: 400 until the third round's numerics
    # alerts, which read each rank's loss and its two spike counters (24 series here), 424 until the InfiniBand
    # link-degraded and NVMe-against-its-model alerts, which read each port's rate, port and board info and each
    # drive's info (40 series here); TrainmonJobHung adds each rank's hang suspicion (8 here, 462 in all).
    # Counted as a healthy node serves it: the health reasons are there only for a GPU that needs an action
    # (this scenario's GPUs 1-7 have uncorrected ECC errors or pending remaps: 11 series), none on a healthy node.
    reasons = fleet.count("trainmon_gpu_health_reason_info")
    assert 0 < reasons <= 2 * GPUS
    assert len(fleet) - reasons <= 464


def test_an_unknown_profile_is_refused_naming_the_choices() -> None:
    from trainmon.errors import ConfigError
    from trainmon.settings import parse_profile

    with pytest.raises(ConfigError, match="full, fleet"):
        parse_profile("--profile", "lean")
