"""Write every generated monitoring file: prometheus/rules.yml and alerts.yml, grafana/dashboards/*.json and mixin/.

`--selector` re-targets the rules and the dashboards at another scrape job (the mixin takes it as
`_config.selector`, so it is written the same for any selector).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from grafana.dashgen.build import DASHBOARDS, dashboard_files
from grafana.dashgen.config import DashboardConfig
from prometheus.rulegen.config import RulesConfig
from prometheus.rulegen.render import PROMETHEUS_DIR, rule_files

from .mixin import MIXIN_DIR, mixin_files

REPO = PROMETHEUS_DIR.parent


def generated_files(selector: str) -> dict[Path, str]:
    """Each generated file's text, by its path relative to the repository root."""
    places = (
        (PROMETHEUS_DIR, rule_files(RulesConfig(selector=selector))),
        (DASHBOARDS, dashboard_files(DashboardConfig(selector=selector))),
        (MIXIN_DIR, mixin_files()),
    )
    return {directory.relative_to(REPO) / name: text for directory, files in places for name, text in files.items()}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bundle", description=__doc__)
    parser.add_argument("--selector", default=RulesConfig().selector, help="label matchers of the trainmon targets")
    parser.add_argument("--root", type=Path, default=REPO, help="write under this directory instead of the checkout")
    args = parser.parse_args()
    for path, text in generated_files(args.selector).items():
        (args.root / path).parent.mkdir(parents=True, exist_ok=True)
        (args.root / path).write_text(text)


if __name__ == "__main__":
    main()
