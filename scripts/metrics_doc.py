"""Writes the family tables of docs/metrics.md from trainmon.catalog (`scripts/generate.py --check` finds them stale).

Each table stands between `<!-- generated: SOURCE[, SOURCE…] -->` and `<!-- end -->` (sources as in
`trainmon.catalog.BY_SOURCE`); the prose around them is the doc's own.

    python scripts/metrics_doc.py  # after declaring, renaming or describing a family
"""

from __future__ import annotations

import re
from pathlib import Path

from trainmon.catalog import BY_SOURCE, Family

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
TABLE = re.compile(r"(<!-- generated: ([\w, ]+) -->\n).*?(<!-- end -->)", re.S)
# Families Prometheus records: the demo's tests find them by these words.
RECORDED = "Recorded by the rules of prometheus/rules.yml, not served by the daemon. "


def row(family: Family, source: str) -> str:
    meaning = (RECORDED if source == "rules" else "") + family.help.replace("|", "/")
    return f"| `{family.name}` | {family.kind.value} | {', '.join(family.labels)} | {meaning} |"


def table(sources: str) -> str:
    """The rows of each family of `sources` (comma-separated), in the catalogue's order."""
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for source in (s.strip() for s in sources.split(",")):
        rows += [row(family, source) for family in BY_SOURCE[source]]
    return "\n".join(rows) + "\n"


def render(text: str) -> str:
    return TABLE.sub(lambda m: f"{m.group(1)}\n{table(m.group(2))}\n{m.group(3)}", text)


if __name__ == "__main__":
    DOC.write_text(render(DOC.read_text()))
