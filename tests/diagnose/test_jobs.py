"""`trainmon diagnose --list`'s queries evaluated by promtool (Prometheus' own engine)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.helpers.tools import require_tool
from trainmon.catalog.training import TRAIN_RANK_INFO
from trainmon.diagnose.jobs import job_queries

WINDOW = 15


def test_a_job_whose_last_scrape_failed_is_still_seen_at_its_last_sample(tmp_path: Path) -> None:
    """Node b's scrape at 59 s failed (a stale marker on every series it serves): at 60 s its job was last seen at
    58 s. Looking once per window (at 60 s alone) saw nothing there and listed the job as last seen at 0."""
    promtool = require_tool("promtool")
    series = [{"series": f'{TRAIN_RANK_INFO}{{job="trainmon",instance="{node}:9400",job_id="{job}",rank="{rank}"}}',
               "values": values}
              for node, job, rank, values in (("a", "ok", "0", "1x60"), ("b", "late", "0", "1x58 stale"),
                                              ("b", "late", "1", "1x58 stale"))]
    ranks, nodes, seen = job_queries(WINDOW)
    checks = [{"expr": ranks, "eval_time": "60s", "exp_samples": [{"labels": '{job_id="ok"}', "value": 1},
                                                                   {"labels": '{job_id="late"}', "value": 2}]},
              {"expr": nodes, "eval_time": "60s", "exp_samples": [{"labels": '{job_id="ok"}', "value": 1},
                                                                   {"labels": '{job_id="late"}', "value": 1}]},
              {"expr": seen, "eval_time": "60s", "exp_samples": [{"labels": '{job_id="ok"}', "value": 60},
                                                                  {"labels": '{job_id="late"}', "value": 58}]}]
    test_file = tmp_path / "jobs.test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1s", "tests": [{
        "interval": "1s", "input_series": series, "promql_expr_test": checks}]}))

    result = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60)

    assert 0 == result.returncode, result.stdout + result.stderr
