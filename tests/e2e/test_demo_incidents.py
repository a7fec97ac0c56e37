"""End to end: `trainmon demo` and each `--incident`, scraped by a real Prometheus 2.42 that loads the
shipped rules unchanged (thresholds, windows, `for:` and evaluation interval).

One demo per incident plus a healthy one, all at once, collecting at the scrape's interval. Each incident's
alert must become active (pending, then firing once its `for:` has passed) for its demo only; those
whose `for:` fits the test (2 minutes) must fire. The stall's rule waits 900 s before it even goes
pending, so for it the test evaluates the shipped expression with that one age divided by 30
(`shorten_expr`), the same logic over a shorter wait; the hang's rule has no `for:` but needs a collective
300 s old, so for it the test evaluates the shipped expression with that age divided by 30 and checks
that it names the hung rank (the real alert fires 5.5 to 6 minutes in). Every dashboard panel has data while
all demos run, NCCL's own view's included (the demo simulates NCCL Inspector and RAS): in `comm-bound` the
slow-link alert's expression (its `for:` is 10 minutes) names the slow rank and its NIC, and in `hang` RAS's
missing rank pages and the hung job's alert names its class and culprit. A demo is stopped once it has shown
all this, which leaves the CPU to those still on their way. The healthy demo, whose run includes a checkpoint
phase, runs until the last incident has shown its alert; it fires nothing and has no alert pending for longer
than 90 s at any time (every `for:` it could reach is 2 minutes or more).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.e2e.alerting_stack import Prometheus, prometheus, shorten_expr
from tests.e2e.test_alerting import panels_without_data
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import free_port
from tests.helpers.tools import require_tool
from tests.prometheus.rulefiles import RULE_FILES, alert_rules
from trainmon.demo.job import JOB_ID
from trainmon.simulation.incidents import HANGS, HUNG_RANK, INCIDENTS, SLOW_LINK_RANK

pytestmark = pytest.mark.slow

HEALTHY_SECONDS = 30  # --incident-after
SCRAPE = "2s"
# `for: 2m` or less; the others' `for:` (5-15 min) is left to run in the demo
FIRES_IN_TEST = {"gpu-lost", "ib-down", "xid-reset", "hang-data", "hang-collective", "hang-gone"}
STALL_FACTOR = 30
HANG_AGE = 300  # seconds, in the shipped TrainmonCollectiveHang (lagging rank)
SHORTENED = {"stall", "hang"}  # their alerts go pending only after minutes: checked by shortened expressions
# Nothing in the healthy run may be on its way to firing. An alert may go pending for an evaluation or two
# where a recorded value lags a raw one: GPUs quiet in a checkpoint whose phase series has already ended, or a
# collector overrunning its cycle on a loaded machine. Every `for:` is minutes longer than this.
MAX_PENDING_SECONDS = 90
# What each incident's alert carries, so that it is seen on the right rank or device.
LABELS = {"straggler": {"rank": "5"}, "slow-gpu": {"rank": "5"},
          "gpu-lost": {"gpu": "6"}, "ib-down": {"device": "mlx5_3"},
          "nvme-slow": {"device": "nvme3n1"}, "storage-slow": {"mount": "/lustre"},
          "xid-reset": {"gpu": "4", "action": "reset_gpu"},
          **{hang: {"class": HANGS[hang], "rank": str(HUNG_RANK)} for hang in HANGS if hang != "hang"}}


class Alerts:
    """Every alert Prometheus has, fetched once per look: one query, not one per demo."""

    def __init__(self, prom: Prometheus) -> None:
        self._prom = prom
        self._all: list[dict[str, str]] = []

    def refresh(self) -> None:
        self._all = [r["metric"] for r in self._prom.query("ALERTS")]

    def of(self, instance: str, job_id: str) -> list[dict[str, str]]:
        """The alerts of one demo: on its instance, or on its job (job-level alerts carry no instance)."""
        return [a for a in self._all if a.get("instance") == instance or a.get("job_id") == job_id]


def active(alerts: Alerts, demo: tuple[str, str], incident: str, state: str | None = None) -> bool:
    wanted = {"alertname": INCIDENTS[incident], **LABELS.get(incident, {})}
    return any(wanted.items() <= a.items() and (state is None or a["alertstate"] == state)
               for a in alerts.of(*demo))


# Eighteen demos and Prometheus share 2 cores with three other test workers in CI: an incident that takes 2-4 minutes
# alone (docs/demo.md) may take longer there. Every incident starts together, so the waits overlap.
INCIDENT_WAIT = 600
DEMO_INTERVAL = "2"  # the scrape's: collecting twice between two scrapes took half as much CPU again, for nothing
PANELS_EVERY = 10  # seconds between two looks at the dashboard panels that have had no data yet


@dataclass
class Duty:
    """One thing a demo must show, polled until `check` returns something true; it may raise once what it sees is
    wrong (a hang named on the wrong rank)."""

    what: str
    check: Callable[[], object]


def stop_once_shown(prom: Prometheus, alerts: Alerts, demos: dict[str, Daemon], where: dict[str, tuple[str, str]],
                    duties: dict[str, list[Duty]]) -> dict[str, list[str]]:
    """Polls each demo's duties in turn and stops the demo once it has shown them all, so that a demo whose alert is
    active no longer takes CPU from those still on their way; but none before every dashboard panel has had data
    with every demo running (a panel fed by one incident alone would lose it). A panel that has had data is not
    queried again: a look at all of them is some 150 queries over eighteen demos' series, and with a look every 10 s
    the test's own process took a quarter of a core (the test alone on 2 cores: 201 core-seconds, now 164).
    Returns, for each stopped demo, the other alerts it had then. Fails at `INCIDENT_WAIT` naming what each demo
    still had to show."""
    left = {name: list(todo) for name, todo in duties.items()}
    others: dict[str, list[str]] = {}
    empty_panels: set[str] | None = None
    panels_at = 0.0
    deadline = time.monotonic() + INCIDENT_WAIT
    while left:
        with contextlib.suppress(httpx.HTTPError):  # a query timed out on a loaded machine: look again
            alerts.refresh()
            if empty_panels is None or (empty_panels and time.monotonic() >= panels_at):
                empty_panels, panels_at = panels_without_data(prom, empty_panels), time.monotonic() + PANELS_EVERY
            for name in list(left):
                while left[name] and left[name][0].check():
                    left[name].pop(0)
                if not left[name] and not empty_panels:
                    del left[name]
                    others[name] = sorted({a["alertname"] for a in alerts.of(*where[name])}
                                          - {INCIDENTS.get(name, "")})
                    demos[name].stop()
        if time.monotonic() > deadline:
            still = {name: todo[0].what for name, todo in left.items() if todo}
            raise AssertionError(f"not shown within {INCIDENT_WAIT} s: {still}; panels without data: {empty_panels}")
        time.sleep(2)
    return others


def first(query: Callable[[], set[tuple[str, ...]]], expected: set[tuple[str, ...]]) -> Callable[[], bool]:
    """For a `Duty`: false while `query` finds nothing; then what it finds must be `expected`."""
    def check() -> bool:
        found = query()
        assert not found or expected == found
        return bool(found)
    return check


@pytest.mark.timeout(1200)
def test_each_incident_ends_in_its_alert_and_the_healthy_demo_fires_nothing(
    tmp_path: Path, daemons: list[Daemon]
) -> None:
    prometheus_bin = require_tool("prometheus")
    names = ["healthy", *INCIDENTS]
    instance = {name: f"127.0.0.1:{free_port()}" for name in names}
    demo = {name: (instance[name], JOB_ID if name == "healthy" else f"{JOB_ID}-{name}") for name in names}
    stall_rule = next(r for r in alert_rules() if r["alert"] == INCIDENTS["stall"])
    stall_instance = f'up{{instance="{instance["stall"]}"}}'
    stalled = f'({shorten_expr(stall_rule["expr"], STALL_FACTOR)}) and on (instance) {stall_instance}'
    hang_rule = next(r for r in alert_rules() if r["alert"] == INCIDENTS["hang"] and "lag" in r["expr"])
    assert f"> {HANG_AGE}\n" in hang_rule["expr"]
    hung = hang_rule["expr"].replace(f"> {HANG_AGE}\n", f"> {HANG_AGE // STALL_FACTOR}\n")
    hung_job = f"{JOB_ID}-hang"
    slow_link = next(r["expr"] for r in alert_rules() if r["alert"] == "TrainmonNCCLSlowLink")

    def of_job(expr: str, job_id: str, *labels: str) -> Callable[[], set[tuple[str, ...]]]:
        return lambda: {tuple(r["metric"].get(label, "") for label in labels) for r in prom.query(expr)
                        if r["metric"]["job_id"] == job_id}

    def hung_job_alerts(alertname: str, *labels: str) -> set[tuple[str, ...]]:
        return {tuple(a.get(label, "") for label in labels) for a in alerts.of(*demo["hang"])
                if a["alertname"] == alertname and a.get("job_id") == hung_job}

    def shown(incident: str, state: str | None = None) -> Duty:
        what = f"{INCIDENTS[incident]} {state or 'active'}"
        return Duty(what, lambda: active(alerts, demo[incident], incident, state))

    duties: dict[str, list[Duty]] = {name: [shown(name)] for name in INCIDENTS if name not in SHORTENED}
    for name in FIRES_IN_TEST:
        duties[name].append(shown(name, "firing"))
    duties["stall"] = [Duty("the shortened stall", lambda: prom.query(stalled))]
    duties["hang"] = [
        Duty("the shortened collective hang", first(of_job(hung, hung_job, "rank"), {(str(HUNG_RANK),)})),
        Duty("RAS's missing rank", lambda: ("unresponsive",) in hung_job_alerts("TrainmonNCCLRanksMissing", "kind")),
        # hang triage: rank 2 never issued the collective its peers wait in (the other hangs are incidents of their
        # own, TrainmonJobHung their alert)
        Duty("TrainmonJobHung", first(lambda: hung_job_alerts("TrainmonJobHung", "class", "rank"),
                                      {(HANGS["hang"], str(HUNG_RANK))})),
    ]
    # NCCL's own view (simulated): Inspector singles out the member on the slow rail, and the slow-link alert's
    # expression (its `for:` is 10 minutes) names it with the NIC NCCL picks for its GPU (rank i on GPU i, its HCA
    # mlx5_i)
    slow_links = of_job(slow_link, f"{JOB_ID}-comm-bound", "rank", "device")
    named: set[tuple[str, ...]] = {(str(SLOW_LINK_RANK), f"mlx5_{SLOW_LINK_RANK}")}
    duties["comm-bound"].append(Duty("the slow link", first(slow_links, named)))

    # Prometheus first: it must see each demo healthy before the incident (a port never seen active is
    # not an alert, by design).
    with prometheus(prometheus_bin, tmp_path, list(instance.values()), list(RULE_FILES), "http://127.0.0.1:9",
                    SCRAPE) as prom:
        alerts = Alerts(prom)
        demos: dict[str, Daemon] = {}
        for name in names:
            args = ["--interval", DEMO_INTERVAL]
            if name != "healthy":
                args += ["--incident", name, "--incident-after", str(HEALTHY_SECONDS)]
            (tmp_path / name).mkdir()
            port = int(instance[name].rsplit(":", 1)[1])
            # eighteen demos start at once beside three other workers: a loaded 2-core machine needs more than 30 s
            daemons.append(demos.setdefault(name, start_daemon(tmp_path / name, args, command="demo", port=port,
                                                               ready_timeout=120)))
        # the healthy demo runs until every incident has shown its alert
        others = stop_once_shown(prom, alerts, demos, demo, duties)

        alerts.refresh()
        healthy = alerts.of(*demo["healthy"])
        assert [] == [a for a in healthy if a["alertstate"] == "firing"]
        host, job_id = demo["healthy"]
        longest = prom.query(f'max_over_time((time() - ALERTS_FOR_STATE{{instance="{host}"}})[10m:5s]) '
                             f'or max_over_time((time() - ALERTS_FOR_STATE{{job_id="{job_id}"}})[10m:5s])')
        assert [] == [(r["metric"]["alertname"], r["value"][1]) for r in longest
                      if float(r["value"][1]) > MAX_PENDING_SECONDS]
        assert prom.query(f'max_over_time(trainmon_train_phase{{instance="{instance["healthy"]}",'
                          f'phase="checkpoint"}}[10m])'), "the healthy run had its checkpoint"
    print(others)
