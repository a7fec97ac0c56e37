"""The documentation holds together: the README is short and links every doc, no relative link dangles,
docs/configuration.md is what scripts/configuration_doc.py makes of the flag table today, and docs/metrics.md's
tables are what scripts/metrics_doc.py makes of the catalogue."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from trainmon.catalog import BY_SOURCE, FAMILIES
from trainmon.collectors import AVAILABLE
from trainmon.settings import serve_options
from trainmon.simulation.incidents import INCIDENTS

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
MARKDOWN = [README, REPO / "CONTRIBUTING.md", *DOCS]
README_LIMIT_BYTES = 12 * 1024
LINK = re.compile(r"\]\(([^)\s]+)\)")


def relative_links(text: str) -> list[str]:
    """Link targets that name a file in the checkout (no scheme, not a bare #anchor), anchors cut off."""
    return [target.split("#", 1)[0] for target in LINK.findall(text)
            if not re.match(r"[a-z]+:", target) and not target.startswith("#")]


def test_the_readme_stays_short() -> None:
    assert README.stat().st_size <= README_LIMIT_BYTES


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_no_relative_link_dangles(doc: Path) -> None:
    dangling = [target for target in relative_links(doc.read_text()) if not (doc.parent / target).exists()]

    assert [] == dangling


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_a_users_doc_never_points_at_the_spec(doc: Path) -> None:
    """A user has no SPEC: a doc says the thing, or links the doc that does."""
    assert [] == [line for line in doc.read_text().splitlines() if "SPEC §" in line]


def test_the_demo_doc_has_a_row_for_every_incident() -> None:
    rows = {line.split("|")[1].strip().strip("`") for line in (REPO / "docs" / "demo.md").read_text().splitlines()
            if line.startswith("| `")}

    assert [] == [name for name in INCIDENTS if name not in rows]


def test_the_readme_links_every_doc() -> None:
    linked = {(REPO / target).resolve() for target in relative_links(README.read_text())}

    assert [] == [str(doc.relative_to(REPO)) for doc in [*DOCS, REPO / "CONTRIBUTING.md"] if doc not in linked]


def test_link_check_sees_a_dangling_link() -> None:
    assert ["missing.md", "../x.py"] == relative_links("[a](missing.md#b) [c](https://x.org) [d](#e) [f](../x.py)")


def test_every_serve_flag_is_in_the_configuration_doc() -> None:
    """The doc the SPEC's flag list is checked against: a flag added in code and not documented fails here."""
    text = (REPO / "docs" / "configuration.md").read_text()

    assert [] == [o.flag for o in serve_options(list(AVAILABLE)) if f"`--{o.flag}" not in text]


def metrics_doc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("metrics_doc", REPO / "scripts" / "metrics_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_metrics_doc_tables_are_what_the_catalogue_makes_of_them() -> None:
    text = (REPO / "docs" / "metrics.md").read_text()

    assert text == metrics_doc().render(text), "run python scripts/generate.py"


def test_every_family_has_one_row_in_the_metrics_doc() -> None:
    """A new source needs a `<!-- generated: source -->` table; no source has two."""
    sources = [source.strip() for marker in metrics_doc().TABLE.findall((REPO / "docs" / "metrics.md").read_text())
               for source in marker[1].split(",")]

    assert sorted(BY_SOURCE) == sorted(sources)
    assert len(FAMILIES) == sum(len(BY_SOURCE[source]) for source in sources)


def test_a_stale_metrics_doc_table_is_rewritten() -> None:
    stale = "prose\n<!-- generated: aer -->\n| old |\n<!-- end -->\nmore prose\n"

    assert ["prose", "<!-- generated: aer -->", "", "| metric | type | labels | meaning |", "|---|---|---|---|",
            "| `trainmon_pcie_aer_errors_total` | counter | device, severity, error | "
            + BY_SOURCE["aer"][0].help + " |", "", "<!-- end -->", "more prose"] == \
        metrics_doc().render(stale).splitlines()
