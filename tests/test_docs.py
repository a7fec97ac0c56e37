"""The documentation holds together: the README is short and links every doc, no relative link dangles,
and docs/configuration.md is what scripts/configuration_doc.py makes of the flag table today."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
