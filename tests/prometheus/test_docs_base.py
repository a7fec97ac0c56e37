"""The documentation's base URL is set in one place (trainmon.DOCS_BASE) for alerts, the systemd unit and diagnose."""

from __future__ import annotations

from prometheus.rulegen.config import RulesConfig

from tests.prometheus.rulefiles import REPO, alert_rules
from trainmon import DOCS_BASE
from trainmon.diagnose.model import RUNBOOK as DIAGNOSE_RUNBOOK

UNIT = REPO / "deploy" / "systemd" / "trainmon.service"


def test_runbook_urls_start_with_the_docs_base() -> None:
    assert RulesConfig().runbook.startswith(DOCS_BASE + "/")
    assert all(r["annotations"]["runbook_url"].startswith(DOCS_BASE + "/runbook.md#") for r in alert_rules())


def test_the_unit_documentation_line_starts_with_the_docs_base() -> None:
    [line] = [line for line in UNIT.read_text().splitlines() if line.startswith("Documentation=")]

    assert line.removeprefix("Documentation=").startswith(DOCS_BASE + "/")


def test_diagnose_links_start_with_the_docs_base() -> None:
    assert DIAGNOSE_RUNBOOK == DOCS_BASE + "/runbook.md"
