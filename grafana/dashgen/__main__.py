"""Write grafana/dashboards/*.json; `--selector` re-targets them at another scrape job, as it does the rules."""

from __future__ import annotations

import argparse
from pathlib import Path

from .build import DASHBOARDS, dashboard_files
from .config import DashboardConfig


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m grafana.dashgen", description=__doc__)
    parser.add_argument("--selector", default=DashboardConfig().selector, help="label matchers of the trainmon targets")
    parser.add_argument("--out", type=Path, default=DASHBOARDS, help="directory to write into")
    args = parser.parse_args()
    for name, text in dashboard_files(DashboardConfig(selector=args.selector)).items():
        (args.out / name).write_text(text)


if __name__ == "__main__":
    main()
