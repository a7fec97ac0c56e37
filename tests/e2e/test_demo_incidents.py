"""End to end: `trainmon demo` and each `--incident`, scraped by a real Prometheus 2.42 that loads the
shipped rules unchanged (thresholds, windows, `for:` and evaluation interval).

One demo per incident plus a healthy one, all at once, at the demo's own interval. Each incident's
alert must become active (pending, then firing once its `for:` has passed) for its demo only; those
whose `for:` fits the test (2 minutes) must fire. The stall's rule waits 900 s before it even goes
pending, so for it the test evaluates the shipped expression with that one age divided by 30
(`shorten_expr`), the same logic over a shorter wait; the hang's rule has no `for:` but needs a collective
300 s old, so for it the test evaluates the shipped expression with that age divided by 30 and checks
that it names the hung rank (the real alert fires 5.5 to 6 minutes in). The healthy demo, whose run
includes a checkpoint phase, fires nothing and has no alert pending for longer than 90 s at any time
(every `for:` it could reach is 2 minutes or more), and every dashboard panel has data, NCCL's own view's
included (the demo simulates NCCL Inspector and RAS): in `comm-bound` the slow-link alert's expression (its
`for:` is 10 minutes) names the slow rank and its NIC, and in `hang` RAS's missing rank pages and the hung job's
alert names its class and culprit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

import pytest

from tests.e2e.alerting_stack import Prometheus, prometheus, shorten_expr
from tests.e2e.test_alerting import panels_without_data
from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import free_port, wait_until
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
# collector overrunning its 1 s cycle on a loaded machine. Every `for:` is minutes longer than this.
MAX_PENDING_SECONDS = 90
# What each incident's alert carries, so that it is seen on the right rank or device.
LABELS = {"straggler": {"rank": "5"}, "slow-gpu": {"rank": "5"},
          "gpu-lost": {"gpu": "6"}, "ib-down": {"device": "mlx5_3"},
          "nvme-slow": {"device": "nvme3n1"}, "storage-slow": {"mount": "/lustre"},
          "xid-reset": {"gpu": "4", "action": "reset_gpu"},
          **{hang: {"class": HANGS[hang], "rank": str(HUNG_RANK)} for hang in HANGS if hang != "hang"}}


def alerts_of(prom: Prometheus, instance: str, job_id: str) -> list[dict[str, str]]:
    """The alerts of one demo: on its instance, or on its job (job-level alerts carry no instance)."""
    return [r["metric"] for r in prom.query(f'ALERTS{{instance="{instance}"}} or ALERTS{{job_id="{job_id}"}}')]


def active(prom: Prometheus, demo: tuple[str, str], incident: str, state: str | None = None) -> bool:
    wanted = {"alertname": INCIDENTS[incident], **LABELS.get(incident, {})}
    return any(wanted.items() <= a.items() and (state is None or a["alertstate"] == state)
               for a in alerts_of(prom, *demo))


def all_active(prom: Prometheus, demos: dict[str, tuple[str, str]], incidents: Collection[str],
               state: str | None = None) -> Callable[[], bool]:
    """For `wait_until`: true once every incident's alert is active; until then it raises, naming those that
    are not, so that a wait that runs out says which."""
    def check() -> bool:
        missing = [i for i in incidents if not active(prom, demos[i], i, state)]
        if missing:
            raise AssertionError(f"not {state or 'active'} yet: {missing}")
        return True
    return check


# Fifteen demos and Prometheus share 2 cores with three other test workers in CI: an incident that takes 2-4 minutes
# alone (docs/demo.md) may take longer there: CI passed at 413 s of 420, a run beside four other engineers' tests
# (load 22) missed the straggler and comm-bound by 420 s. The waits overlap (every incident started together), so
# the whole test stays under its timeout.
INCIDENT_WAIT = 600


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

    # Prometheus first: it must see each demo healthy before the incident (a port never seen active is
    # not an alert, by design).
    with prometheus(prometheus_bin, tmp_path, list(instance.values()), list(RULE_FILES), "http://127.0.0.1:9",
                    SCRAPE) as prom:
        demos: dict[str, Daemon] = {}
        for name in names:
            args = [] if name == "healthy" else ["--incident", name, "--incident-after", str(HEALTHY_SECONDS)]
            (tmp_path / name).mkdir()
            port = int(instance[name].rsplit(":", 1)[1])
            # fifteen demos start at once beside three other workers: a loaded 2-core machine needs more than 30 s
            daemons.append(demos.setdefault(name, start_daemon(tmp_path / name, args, command="demo", port=port,
                                                               ready_timeout=120)))
        wait_until(all_active(prom, demo, [i for i in INCIDENTS if i not in SHORTENED]), timeout=INCIDENT_WAIT,
                   interval=2)
        wait_until(lambda: prom.query(stalled), timeout=120, interval=2)
        hung_ranks = wait_until(lambda: {r["metric"]["rank"] for r in prom.query(hung)
                                         if r["metric"]["job_id"] == hung_job}, timeout=120, interval=2)
        assert {str(HUNG_RANK)} == hung_ranks
        wait_until(all_active(prom, demo, FIRES_IN_TEST, "firing"), timeout=INCIDENT_WAIT, interval=2)
        # NCCL's own view (simulated): Inspector singles out the member on the slow rail, and the slow-link alert's
        # expression (its `for:` is 10 minutes) names it with the NIC NCCL picks for its GPU; RAS loses the hung rank
        slow_links = wait_until(lambda: {(r["metric"]["rank"], r["metric"].get("device")) for r in prom.query(slow_link)
                                         if r["metric"]["job_id"] == f"{JOB_ID}-comm-bound"}, timeout=300, interval=2)
        assert {(str(SLOW_LINK_RANK), f"mlx5_{SLOW_LINK_RANK}")} == slow_links  # rank i on GPU i, its HCA mlx5_i
        wait_until(lambda: prom.query(f'ALERTS{{alertname="TrainmonNCCLRanksMissing",job_id="{hung_job}",'
                                      f'kind="unresponsive"}}'), timeout=300, interval=2)
        # hang triage: rank 2 never issued the collective its peers wait in (the other hangs are incidents of their
        # own, TrainmonJobHung their alert)
        hung_alerts = wait_until(lambda: {(a["metric"]["class"], a["metric"]["rank"]) for a in prom.query(
            f'ALERTS{{alertname="TrainmonJobHung",job_id="{hung_job}"}}')}, timeout=120, interval=2)
        assert {(HANGS["hang"], str(HUNG_RANK))} == hung_alerts

        healthy = alerts_of(prom, *demo["healthy"])
        assert [] == [a for a in healthy if a["alertstate"] == "firing"]
        host, job_id = demo["healthy"]
        longest = prom.query(f'max_over_time((time() - ALERTS_FOR_STATE{{instance="{host}"}})[10m:5s]) '
                             f'or max_over_time((time() - ALERTS_FOR_STATE{{job_id="{job_id}"}})[10m:5s])')
        assert [] == [(r["metric"]["alertname"], r["value"][1]) for r in longest
                      if float(r["value"][1]) > MAX_PENDING_SECONDS]
        assert prom.query(f'max_over_time(trainmon_train_phase{{instance="{instance["healthy"]}",'
                          f'phase="checkpoint"}}[10m])'), "the healthy run had its checkpoint"
        others = {name: sorted({a["alertname"] for a in alerts_of(prom, *demo[name])} - {alert})
                  for name, alert in INCIDENTS.items()}
        # the hang feeds Collectives in flight; the demo's simulated NCCL Inspector and RAS feed NCCL's own view
        assert set() == panels_without_data(prom)
    print(others)
