"""The healthy demo fires nothing for 20 minutes of its time, judged by promtool over series it served.

A real demo is scraped for one period of its checkpoints, in compressed time: the demo checkpoints 5 times
as often as it would (`--checkpoint-every 24`) and is scraped every second, each scrape standing for 5 s,
so 24 scrapes are the 2 minutes of a healthy run with its checkpoint, the counters rising 5 times what they
rose in the real second (their rates are the real ones). The samples become a promtool input series that
repeats that period for 20 minutes (counters go on rising by what they rose, "now" timestamps go on
advancing, series absent from a scrape are stale there), and `promtool test rules` evaluates the shipped
rules over it, unchanged. A planted incident fails the same check (the second test), so the check can see
an alert. The recorded period must be steady: what changes within it comes back with every repeat, as the
checkpoint does.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.daemon import Daemon, start_daemon
from tests.helpers.net import wait_until
from tests.prometheus.rulefiles import alert_rules, run_promtool_tests
from trainmon.catalog.training import TRAIN_PHASE
from trainmon.simulation.incidents import CHECKPOINT_EVERY_S

# promtool takes a few seconds of CPU: beside three other workers on 2 cores the test nears the 60 s limit
pytestmark = pytest.mark.slow

SCRAPE_SECONDS = 1.0  # real time between scrapes
COMPRESSION = 5  # each scrape stands for 5 s of the healthy run
SIMULATED_SCRAPE_SECONDS = int(SCRAPE_SECONDS * COMPRESSION)
CHECKPOINT_EVERY = CHECKPOINT_EVERY_S / COMPRESSION
SCRAPES = int(CHECKPOINT_EVERY / SCRAPE_SECONDS)  # one period, a whole checkpoint in it
SIMULATED_MINUTES = 20  # beyond every `for:` a healthy run could reach (15 min at most)
TARGET = {"job": "trainmon", "instance": "demo:9400"}
CUMULATIVE_SUFFIXES = ("_total", "_bucket", "_count", "_sum")


@dataclass
class Recording:
    """Each series' value at each scrape (None where the scrape lacked it), and whether it only rises."""

    walls: list[float] = field(default_factory=list)
    checkpointing: list[bool] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(default_factory=dict)
    cumulative: set[str] = field(default_factory=set)

    def add(self, text: str, wall: float) -> None:
        index = len(self.walls)
        self.walls.append(wall)
        self.checkpointing.append(in_checkpoint(text))
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not math.isfinite(sample.value):
                    continue
                key = sample.name + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in
                                                   sorted({**sample.labels, **TARGET}.items())) + "}"
                series = self.values.setdefault(key, [None] * index)
                series.extend([None] * (index - len(series)))
                series.append(sample.value)
                if family.type in ("counter", "histogram", "summary") and sample.name.endswith(CUMULATIVE_SUFFIXES):
                    self.cumulative.add(key)

    def rose(self, name: str, label: str) -> bool:
        """Whether a series of `name` with `label` rose within the recording (or began in it)."""
        for key, values in self.values.items():
            present = [v for v in values if v is not None]
            if key.startswith(name) and label in key and present and (values[0] is None or present[-1] > present[0]):
                return True
        return False

    def repeated(self, key: str, points: int) -> str:
        """The promtool `values` of `key` over `points` scrapes, the recording repeated."""
        recorded = self.values[key] + [None] * (len(self.walls) - len(self.values[key]))
        period = len(recorded)
        present = [v for v in recorded if v is not None]
        per_scrape = (present[-1] - present[0]) / max(1, len(present) - 1)  # a counter's rise across a repeat
        timestamp = key.split("{", 1)[0].endswith("_timestamp_seconds")
        now_like = timestamp and len(set(present)) > 1
        out: list[str] = []
        total, last = 0.0, None
        for point in range(points):
            value = recorded[point % period]
            if value is None:
                out.append("stale")
                continue
            if key in self.cumulative:
                if last is None:
                    total = value
                else:
                    total += COMPRESSION * (value - last if point % period else per_scrape)
                last = value
                value = total
            elif now_like:  # a "now" timestamp follows the simulated clock
                value += point * SIMULATED_SCRAPE_SECONDS - self.walls[point % period]
            elif timestamp:  # a constant one keeps its distance from the recording's start
                value -= self.walls[0]
            out.append(repr(float(value)))
        return " ".join(out)


def in_checkpoint(text: str) -> bool:
    return any(line.startswith(f"{TRAIN_PHASE}{{") and 'phase="checkpoint"' in line and line.endswith(" 1.0")
               for line in text.splitlines())


def record_demo(tmp_path: Path, daemons: list[Daemon], args: list[str]) -> Recording:
    daemons.append(daemon := start_daemon(tmp_path, [*args, "--checkpoint-every", f"{CHECKPOINT_EVERY:g}"],
                                          command="demo"))
    wait_until(lambda: daemon.metrics_text().count("trainmon_train_steps_total{") >= 8, timeout=30)
    # Half a period after a checkpoint's end: the period recorded then holds the next checkpoint whole, far from
    # its edges however late a loaded machine delivers reports or takes scrapes. A checkpoint cut by the period's
    # start is whole in every repeat but the first, which comes back shorter; the shorter one pulls down the
    # baseline TrainmonCheckpointWriteSlow judges by, and a CI run under load saw that alert fire.
    wait_until(lambda: in_checkpoint(daemon.metrics_text()), timeout=2 * CHECKPOINT_EVERY + 30, interval=0.2)
    wait_until(lambda: not in_checkpoint(daemon.metrics_text()), timeout=CHECKPOINT_EVERY, interval=0.2)
    time.sleep(CHECKPOINT_EVERY / 2)
    recording = Recording()
    start = time.monotonic()
    for scrape in range(SCRAPES):  # on a fixed beat: a slow scrape does not push the later ones back
        time.sleep(max(0.0, start + scrape * SCRAPE_SECONDS - time.monotonic()))
        recording.add(daemon.metrics_text(), time.time())
    return recording


def fired(tmp_path: Path, recording: Recording, minutes: int = SIMULATED_MINUTES) -> str:
    """promtool's report of the alerts that fire over the recording repeated for `minutes` ('' when none do)."""
    points = minutes * 60 // SIMULATED_SCRAPE_SECONDS + 1
    series = [{"series": key, "values": recording.repeated(key, points)} for key in sorted(recording.values)]
    series.append({"series": 'up{instance="demo:9400",job="trainmon"}', "values": " ".join(["1"] * points)})
    names = sorted({rule["alert"] for rule in alert_rules()})
    checks = [{"eval_time": f"{minute}m", "alertname": name, "exp_alerts": []}
              for minute in range(1, minutes + 1) for name in names]
    test = {"evaluation_interval": "30s",
            "tests": [{"interval": f"{SIMULATED_SCRAPE_SECONDS}s", "input_series": series, "alert_rule_test": checks}]}
    (path := tmp_path / "healthy.test.yml").write_text(yaml.safe_dump(test, width=1 << 20))
    result = run_promtool_tests(path, tmp_path)
    return "" if result.returncode == 0 else result.stdout + result.stderr


def test_the_healthy_demo_fires_no_alert_in_twenty_minutes(tmp_path: Path, daemons: list[Daemon]) -> None:
    recording = record_demo(tmp_path, daemons, [])

    assert recording.rose('trainmon_train_phase_seconds_total{', 'phase="checkpoint"'), "it has a checkpoint"
    edges = recording.checkpointing[0], recording.checkpointing[-1]
    assert any(recording.checkpointing) and not any(edges), f"a whole checkpoint: {recording.checkpointing}"
    assert "" == fired(tmp_path, recording)


def test_the_same_check_sees_a_planted_incident_fire(tmp_path: Path, daemons: list[Daemon]) -> None:
    """An incident that holds steady through the recorded period (a collapsing loss scale would restart with
    every repeat), replayed for 5 minutes: its alert's `for:` is 2."""
    recording = record_demo(tmp_path, daemons, ["--incident", "gpu-lost", "--incident-after", "1"])

    assert "TrainmonGPULost" in fired(tmp_path, recording, minutes=5)
