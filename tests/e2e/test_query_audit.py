"""Every PromQL expression trainmon ships runs without error on a realistic fleet (issue 31).

A real daemon on a synthetic node with every family a GPU node has (8 GPUs on the fake NVML, NVMe,
InfiniBand, Slurm owners, 8 training ranks) gives one exposition; `NODES` nodes of it, each with its own
GPUs, job and ranks (tests/bench/bench_fleet.py), are backfilled into a real Prometheus 2.42 by
`promtool tsdb create-blocks-from openmetrics`. Prometheus evaluates every shipped rule file, and every
expression is then queried, instant and over the data's range: recording and alert rules, dashboard
targets and variables (set to "All" and to one value), and `trainmon diagnose` for every job. The
expressions are found in the shipped files, so one added later is audited without changing this test.

Errors such as `vector cannot contain metrics with the same labelset` depend on the data, not on the
syntax, which is why promtool's `check rules` does not find them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.bench.bench_fleet import (
    SCRAPE_SECONDS,
    node_exposition,
    node_name,
    node_samples,
    placements,
    series_lines,
    write_openmetrics,
)
from tests.e2e.alerting_stack import served
from tests.e2e.gpu_nodes import NODE_FAMILIES, ingest_socket, node_daemon
from tests.fake_nvml.fixtures import fake_nvml_dir  # noqa: F401  (fixture)
from tests.grafana.dashboards import DASHBOARD_FILES, data_panels, load
from tests.helpers.net import free_port, wait_until
from tests.helpers.node import SyntheticNode, served_with_ranks
from tests.helpers.tools import require_tool
from tests.prometheus.rulefiles import PROMETHEUS
from tests.torch.jobs import REPO

pytestmark = pytest.mark.slow  # a real Prometheus over a backfilled fleet, and a daemon to build its data

NODES = 4  # jobs of 1 and 2 nodes (bench_fleet.placements)
GPUS = 8  # bench_fleet numbers ranks 8 to a node
MINUTES = 10
RULE_INTERVAL = "2s"  # the shipped expressions, evaluated often enough to see every one within seconds
LABEL_VALUES = re.compile(r"label_values\((.*),\s*\w+\)")
VARIABLE = re.compile(r"\$\{?(\w+)\}?")


@dataclass(frozen=True)
class Fleet:
    url: str
    start: float  # the oldest sample
    end: float  # the newest sample
    jobs: tuple[str, ...]


def shipped_rule_files() -> list[Path]:
    return [path for path in sorted(PROMETHEUS.glob("*.yml")) if "groups" in (yaml.safe_load(path.read_text()) or {})]


def rule_exprs() -> list[tuple[str, str]]:
    """(where, expr) of every recording and alerting rule in the shipped rule files."""
    return [(f"{path.name}: {rule.get('record') or rule.get('alert')}", rule["expr"])
            for path in shipped_rule_files() for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"]]


def dashboard_exprs(values: dict[str, str]) -> list[tuple[str, str]]:
    """(where, expr) of every dashboard target and query variable, each variable set to `values` or, where
    absent, to Grafana's "All" (a regex of anything)."""
    found = []
    for path in DASHBOARD_FILES:
        board = load(path)
        for panel in data_panels(board):
            found += [(f"{path.name}: {panel['title']}", target["expr"]) for target in panel["targets"]
                      if target.get("expr")]
        for variable in board.get("templating", {}).get("list", []):
            selector = LABEL_VALUES.fullmatch(str(variable.get("query", "")))
            if selector:
                found.append((f"{path.name}: ${variable['name']}", selector[1]))
    return [(where, fill(expr, values)) for where, expr in found]


def fill(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "30s").replace("$__range", "5m")
    if not values:  # "All": an equality on a variable becomes a regex match of anything
        expr = re.sub(r'(\w+)\s*=\s*"(\$\{?\w+\}?)"', r'\1=~"\2"', expr)
    return VARIABLE.sub(lambda m: values.get(m[1], ".*"), expr)


def exposition(work: Path, nvml_dir: Path) -> str:
    """What a real daemon serves for a node with every family: GPUs, NVMe, InfiniBand, owners and ranks."""
    node = SyntheticNode(work, gpus=GPUS, nvme_namespaces=4, ib_ports=2)
    with node_daemon(node, nvml_dir) as daemon:
        return served_with_ranks(daemon, ingest_socket(node), GPUS)


def backfill(promtool: str, template: str, tsdb: Path, end: int) -> tuple[int, tuple[str, ...]]:
    """`MINUTES` of `NODES` nodes' samples ending at `end`; returns the first sample's time and the job ids."""
    where = placements(NODES)
    fleet = [node_samples(node_exposition(template, n, p), n) for n, p in enumerate(where)]
    growing = [s.value for s in series_lines(template) if s.grows]
    since = end - MINUTES * 60
    write_openmetrics(tsdb.parent / "fleet.om", fleet, growing, list(range(since, end + 1, SCRAPE_SECONDS)), since)
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(tsdb.parent / "fleet.om"),
                    str(tsdb)], check=True, capture_output=True, timeout=300)
    return since, tuple(sorted({p.job_id for p in where}))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, fake_nvml_dir: Path) -> Iterator[Fleet]:  # noqa: F811
    binary, promtool = require_tool("prometheus"), require_tool("promtool")
    work = tmp_path_factory.mktemp("audit")
    (work / "node").mkdir()
    template = exposition(work / "node", fake_nvml_dir)
    end = int(time.time()) - SCRAPE_SECONDS  # Prometheus appends rule results after the newest sample only
    start, jobs = backfill(promtool, template, work / "tsdb", end)
    rule_files = []
    for path in shipped_rule_files():
        document = yaml.safe_load(path.read_text())
        for group in document["groups"]:
            group["interval"] = RULE_INTERVAL
        (work / path.name).write_text(yaml.safe_dump(document, sort_keys=False))
        rule_files.append(str(work / path.name))
    (work / "prometheus.yml").write_text(yaml.safe_dump({"rule_files": rule_files}))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}"]
    with served(argv, work / "prometheus.log", url + "/-/ready"):
        yield Fleet(url, start, end, jobs)


def query_errors(url: str, exprs: list[tuple[str, str]], start: float, end: float) -> list[str]:
    """Each expression's error, instant at `end` and over [start, end]: empty when every one ran. An expression
    shipped in several places (the XID catalogue's `vector(1)` records) is queried once, naming every place."""
    places: dict[str, list[str]] = {}
    for where, expr in exprs:
        places.setdefault(expr, []).append(where)
    errors = []
    # One client for every query: `httpx.get` builds a client (and its TLS context) each time, which cost more
    # than the queries themselves.
    with httpx.Client(base_url=url, timeout=60) as client:
        for expr, wheres in places.items():
            for path, params in (("query", {"time": end}),
                                 ("query_range", {"start": start, "end": end, "step": 60})):
                answer = client.get(f"/api/v1/{path}", params={"query": expr, **params}).json()
                if answer["status"] != "success":
                    errors.append(f"{', '.join(wheres)} ({path}): {answer.get('error')}: {expr}")
    return errors


def rule_evaluations(url: str) -> list[dict[str, Any]]:
    return [rule for group in httpx.get(url + "/api/v1/rules", timeout=30).json()["data"]["groups"]
            for rule in group["rules"]]


def test_the_dataset_has_every_family_of_a_gpu_node(fleet: Fleet) -> None:
    names = {s["__name__"] for s in httpx.get(fleet.url + "/api/v1/series", timeout=30, params={
        "match[]": '{__name__=~"trainmon_.+"}', "start": fleet.start, "end": fleet.end}).json()["data"]}

    assert {*NODE_FAMILIES, "trainmon_train_steps_total"} <= names


def test_every_shipped_rule_evaluates_without_error(fleet: Fleet) -> None:
    wait_until(lambda: all(r["lastEvaluation"] > "2000" for r in rule_evaluations(fleet.url)), timeout=60)
    time.sleep(2 * int(RULE_INTERVAL[:-1]))  # rules that read recorded series see them
    failed = [f"{r['name']}: {r['lastError']}" for r in rule_evaluations(fleet.url) if r["health"] != "ok"]

    assert len(rule_evaluations(fleet.url)) == len(rule_exprs())
    assert failed == []


def test_every_rule_expression_queries_without_error(fleet: Fleet) -> None:
    assert query_errors(fleet.url, rule_exprs(), fleet.start, fleet.end) == []


@pytest.mark.parametrize("values", [{}, {"job": "trainmon", "job_id": "job-1", "instance": node_name(1)}],
                         ids=["all", "one"])
def test_every_dashboard_query_runs_without_error(fleet: Fleet, values: dict[str, str]) -> None:
    exprs = dashboard_exprs(values)

    assert len(exprs) > 50
    assert query_errors(fleet.url, exprs, fleet.start, fleet.end) == []


def test_diagnose_reads_every_job_of_the_fleet(fleet: Fleet) -> None:
    for job in fleet.jobs:
        done = subprocess.run([sys.executable, "-m", "trainmon", "diagnose", "--prometheus", fleet.url, "--job", job,
                               "--since", "5m", "--json"], capture_output=True, text=True, timeout=120, cwd=REPO)

        assert (done.returncode in {0, 1}, "") == (True, done.stderr), job
        assert job == json.loads(done.stdout)["job_id"]
