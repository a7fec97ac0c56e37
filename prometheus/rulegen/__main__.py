"""Write prometheus/rules.yml and alerts.yml; `--selector` re-targets them at another scrape job."""

from __future__ import annotations

import argparse
from pathlib import Path

from .config import RulesConfig
from .render import PROMETHEUS_DIR, rule_files


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m prometheus.rulegen", description=__doc__)
    parser.add_argument("--selector", default=RulesConfig().selector, help="label matchers of the trainmon targets")
    parser.add_argument("--out", type=Path, default=PROMETHEUS_DIR, help="directory to write into")
    args = parser.parse_args()
    for name, text in rule_files(RulesConfig(selector=args.selector)).items():
        (args.out / name).write_text(text)


if __name__ == "__main__":
    main()
