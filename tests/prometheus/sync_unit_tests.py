"""Bring prometheus/tests/*.test.yml in line with the generated rule files after a regeneration.

Two things in them follow the generator, not the test's intent: `group_eval_order` lists every group in file
order (tests/prometheus/test_rules.py checks it), and each expected alert's `dashboard_url` carries a panel id
from the generated dashboards, so a new panel renumbers the links of the panels after it (promtool compares
annotations whole). After regenerating the rules, run

    python -m tests.prometheus.sync_unit_tests

It leaves the scenario files, which `tests.prometheus.instability_scenarios` writes whole, and in the others
rewrites only the `group_eval_order:` and `dashboard_url:` lines (adding a link where an expected alert has
none), keeping every other line and comment; `git diff` then shows what moved.
"""

from __future__ import annotations

import re

import yaml

from tests.prometheus.rulefiles import PROMETHEUS, SCENARIO_TESTS, alert_rules, group_names

TESTS = PROMETHEUS / "tests"
LABEL = re.compile(r"\{\{\s*\$labels\.(\w+)\s*\}\}")
ALERTNAME = re.compile(r"^\s*alertname:\s*(\S+)")
EXP_LABELS = re.compile(r"^\s*-?\s*exp_labels:\s*(\{.*\})\s*$")
EXP_ANNOTATIONS = re.compile(r"^(\s*)exp_annotations:\s*$")
GROUP_EVAL_ORDER = re.compile(r"^group_eval_order:.*$", re.M)
EXP_ALERTS_INLINE = re.compile(r"^(\s*)exp_alerts:\s*(\[.+\])\s*$")


def group_order() -> str:
    return f"group_eval_order: [{', '.join(group_names())}]"


def dashboard_url_templates() -> dict[str, str]:
    return {rule["alert"]: rule["annotations"]["dashboard_url"] for rule in alert_rules()}


def expand(template: str, labels: dict[str, object]) -> str:
    return LABEL.sub(lambda m: str(labels.get(m.group(1), "")), template)


def fill_inline(indent: str, alerts: list[dict[str, dict[str, object]]], template: str) -> str | None:
    """`exp_alerts: [{exp_labels: {…}, exp_annotations: {…}}]` on one line, written back on one line."""
    before = [dict(alert.get("exp_annotations", {})) for alert in alerts]
    for alert in alerts:
        alert.setdefault("exp_annotations", {})["dashboard_url"] = expand(template, alert.get("exp_labels", {}))
    if before == [alert["exp_annotations"] for alert in alerts]:
        return None
    flow = yaml.safe_dump(alerts, default_flow_style=True, width=1 << 20, sort_keys=False).strip()
    return f"{indent}exp_alerts: {flow}\n"


def fill(text: str, templates: dict[str, str]) -> str:
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    alertname = ""
    labels: dict[str, object] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if match := ALERTNAME.match(line):
            alertname = match.group(1)
        elif (match := EXP_ALERTS_INLINE.match(line)) and alertname in templates:
            out[-1] = fill_inline(match.group(1), yaml.safe_load(match.group(2)), templates[alertname]) or line
        elif match := EXP_LABELS.match(line):
            labels = yaml.safe_load(match.group(1))
        elif (match := EXP_ANNOTATIONS.match(line)) and alertname in templates:
            indent = len(match.group(1))
            body: list[str] = []
            while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > indent:
                body.append(lines[i])
                i += 1
            url = expand(templates[alertname], labels)
            kept = [b for b in body if not b.lstrip().startswith("dashboard_url:")]
            key_indent = (len(kept[0]) - len(kept[0].lstrip())) if kept else indent + 2
            out.extend(kept)
            out.append(" " * key_indent + f"dashboard_url: {url}\n")
    return "".join(out)


def main() -> None:
    templates = dashboard_url_templates()
    order = group_order()
    for path in sorted(set(TESTS.glob("*.test.yml")) - set(SCENARIO_TESTS)):  # those are generated whole
        text = path.read_text()
        filled = GROUP_EVAL_ORDER.sub(order, fill(text, templates))
        if filled != text:
            path.write_text(filled)
            print(f"updated {path.relative_to(PROMETHEUS.parent)}")


if __name__ == "__main__":
    main()
