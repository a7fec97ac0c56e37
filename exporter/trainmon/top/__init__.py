"""`trainmon top`: a live terminal view of one node, read from its daemon's `/metrics` and `/api/v1/status`.

Per GPU: utilisation, SM activity, memory, power, the health verdict and who owns it; per training rank:
its job, step time, steps/s, communication and data-wait shares, loss and phase; and what is failing.
Rates are over the daemon's collections of the last `--window` seconds. `--once` prints one screen
(after `--window` seconds, for the rates) and exits 0, 1 when something is failing, 2 when the daemon
cannot be read. Without a terminal the screens are printed one after another, without colours.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
from collections.abc import Sequence

DEFAULT_URL = "http://127.0.0.1:9842"
URL_ENV = "TRAINMON_TOP_URL"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainmon top", description="A live view of this node from its trainmon "
                                     "daemon: GPUs, training ranks, and what is failing.")
    parser.add_argument("--url", default=os.environ.get(URL_ENV) or DEFAULT_URL,
                        help=f"the daemon's base URL (env {URL_ENV}; default {DEFAULT_URL})")
    parser.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                        help="seconds between refreshes (default 2)")
    parser.add_argument("--once", action="store_true",
                        help="print one screen and exit: 0 nothing failing, 1 something failing, 2 daemon unreadable")
    parser.add_argument("--window", type=float, default=10.0, metavar="SECONDS",
                        help="rates (step time, steps/s, shares) over this many seconds of collections (default 10)")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                        help="HTTP timeout per request (default 5)")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if min(args.interval, args.timeout, args.window) <= 0:
        parser.error("--interval, --window and --timeout must be positive")
    missing = [m for m in ("rich", "prometheus_client") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"trainmon top: needs {', '.join(missing)}, in the [daemon] extra: pip install '.[daemon]' in a "
              "trainmon checkout", file=sys.stderr)
        return 2
    from trainmon.top.run import live, once

    if args.once:
        return once(args.url, args.timeout, args.window)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a live view ends
        live(args.url, args.interval, args.timeout, args.window)
    return 0
