"""Write grafana/dashboards/*.json from the generator."""

from __future__ import annotations

from .build import DASHBOARDS, dashboard_files


def main() -> None:
    for name, text in dashboard_files().items():
        (DASHBOARDS / name).write_text(text)


if __name__ == "__main__":
    main()
