"""Writes the family tables of docs/metrics.md from trainmon.catalog; `--check` only compares.

Each table stands between `<!-- generated: SOURCE[, SOURCE…] -->` and `<!-- end -->` (sources as in
`trainmon.catalog.BY_SOURCE`); the prose around them is the doc's own.

    python scripts/metrics_doc.py          # after declaring, renaming or describing a family
    python scripts/metrics_doc.py --check  # exit 1 when the committed doc is stale
"""

from __future__ import annotations

import re
import sys
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


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    fresh = render(text)
    if argv == ["--check"]:
        if fresh == text:
            return 0
        print(f"{DOC} is stale: run python scripts/metrics_doc.py", file=sys.stderr)
        return 1
    DOC.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
