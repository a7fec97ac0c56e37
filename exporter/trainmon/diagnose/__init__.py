"""`trainmon diagnose`: what holds a training job back, from Prometheus (SPEC §2).

Standard library only. It reads raw trainmon series through the HTTP API (the recording rules need
not be loaded), splits the job's rank time over the window into its causes, and prints them ranked
by the share of time they cost, with MFU and goodput. Exit 0: nothing found; 1: something found;
2: Prometheus cannot be read (unreachable, an answer cut short, too large, not a query result, or none
complete within `--timeout`), or it has no series of the job: one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence

from trainmon.catalog import gpu, training
from trainmon.diagnose.analysis import Thresholds, diagnose, hang_culprit
from trainmon.diagnose.collect import Collector, daemon_stacks
from trainmon.diagnose.jobs import list_jobs, render_jobs
from trainmon.diagnose.prometheus import PrometheusClient, PrometheusUnreadable, deadline
from trainmon.diagnose.report import render, strict_json

DURATION = re.compile(r"(\d+)([smhdw])")
PROMETHEUS_ENV = "TRAINMON_PROMETHEUS"
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
DEFAULT_TIMEOUT_SECONDS = 60.0
MAX_LINE_CHARS = 500  # an error line quotes what a server said: one line, printable, short


def parse_duration(text: str) -> int:
    """Seconds in a Prometheus-style duration such as `1h`, `90m` or `1h30m`.

    Raises:
        ValueError: anything else, or zero.
    """
    parts = DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration like 1h or 30m: {text!r}")
    seconds = sum(int(n) * UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainmon diagnose", description="What holds a training job back, "
                                     "ranked by the share of the job's time it costs, with MFU and goodput.")
    parser.add_argument("--prometheus", default=os.environ.get(PROMETHEUS_ENV) or None, metavar="URL",
                        help=f"Prometheus base URL (env {PROMETHEUS_ENV})")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--job", metavar="JOB_ID", help="the job_id label of the job")
    what.add_argument("--list", action="store_true",
                      help="list the jobs Prometheus knows: job id, ranks, nodes, last seen (within --since)")
    parser.add_argument("--since", default="1h", metavar="DURATION", help="window to look at (default 1h)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: job_id, since, findings, mfu, goodput (--list: a list)")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "tf32", "fp8"),
                        help=f"the {gpu.GPU_PEAK_FLOPS} dtype MFU divides by (default bf16)")
    parser.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_SECONDS, metavar="SECONDS",
                        help=f"give up (exit 2) when Prometheus has not answered every query by then "
                             f"(default {DEFAULT_TIMEOUT_SECONDS:g})")
    return parser


def positive_seconds(text: str) -> float:
    """A number of seconds for `--timeout`: finite and positive."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < 1e6:
        raise argparse.ArgumentTypeError(f"not a number of seconds between 0 and 1e6: {text!r}")
    return seconds


def one_line(text: str) -> str:
    """`text` as one printable line of at most MAX_LINE_CHARS (it may quote what a server answered)."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= MAX_LINE_CHARS else flat[:MAX_LINE_CHARS - 1] + "…"


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        window = parse_duration(args.since)
    except ValueError as exc:
        parser.error(f"--since: {exc}")
    if not args.prometheus:
        parser.error(f"--prometheus URL (or {PROMETHEUS_ENV}) is required")
    if args.list:
        return list_known_jobs(args.prometheus, window, args.since, as_json=args.json, timeout=args.timeout)
    collector = Collector(PrometheusClient(args.prometheus, timeout=args.timeout), time.time(), window, args.dtype)
    try:
        with deadline(args.timeout, args.prometheus):
            ranks = collector.ranks(args.job)
            instances = {r.instance for r in ranks}
            hardware = collector.hardware(instances) if ranks else []
            mounts = collector.mounts(instances) if ranks else []
    except PrometheusUnreadable as exc:
        print(f"trainmon diagnose: {one_line(str(exc))}", file=sys.stderr)
        return 2
    skipped = _skipped(collector.unusable_ranks)
    if not ranks:
        print(one_line(f"trainmon diagnose: Prometheus at {args.prometheus} has no {training.TRAIN_RANK_INFO} of "
                       f"job_id {args.job!r} in the last {args.since} (check --job and --since)"
                       + (f"; {skipped}" if skipped else "")),
              file=sys.stderr)
        return 2
    if skipped:
        print(one_line(f"trainmon diagnose: {skipped}"), file=sys.stderr)
    hung = hang_culprit(ranks)
    stacks = daemon_stacks(hung[1].instance, args.job, min(args.timeout, 10.0)) if hung else {}
    result = diagnose(args.job, args.since, ranks, hardware, Thresholds(), mounts, stacks)
    print(strict_json(result) if args.json else render(result))
    return 1 if result.findings else 0


def _skipped(unusable: set[tuple[str, str]]) -> str:
    """The once-said note on series whose rank label is not a rank number ("" when there were none)."""
    if not unusable:
        return ""
    instance, label = min(unusable)
    return (f"skipped {len(unusable)} rank(s) whose rank label is not a rank number (such as {label[:40]!r} "
            f"on {instance[:80]!r})")


def list_known_jobs(url: str, window: int, since: str, *, as_json: bool, timeout: float) -> int:
    """Print the jobs seen within the window; 0, or 2 when Prometheus cannot be read."""
    now = time.time()
    try:
        with deadline(timeout, url):
            jobs = list_jobs(PrometheusClient(url, timeout=timeout), now, window)
    except PrometheusUnreadable as exc:
        print(f"trainmon diagnose: {one_line(str(exc))}", file=sys.stderr)
        return 2
    print(json.dumps([j.as_dict() for j in jobs], allow_nan=False) if as_json else render_jobs(jobs, now, since))
    return 0
