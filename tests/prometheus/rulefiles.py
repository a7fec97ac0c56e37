"""Paths and loaders for the shipped rule files and their promtool tests."""

from __future__ import annotations

import functools
import hashlib
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.tools import require_tool

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "prometheus"
RULE_FILES = (PROMETHEUS / "rules.yml", PROMETHEUS / "alerts.yml")
RULE_TESTS = sorted((PROMETHEUS / "tests").glob("*.test.yml"))
# Hours of 64-rank series (instability_scenarios.py writes both): the longest promtool runs, each in a test file
# of its own (test_instability.py, test_causes_scenarios.py).
INSTABILITY_TESTS = PROMETHEUS / "tests" / "instability.test.yml"
CAUSES_TESTS = PROMETHEUS / "tests" / "causes.test.yml"
SCENARIO_TESTS = (INSTABILITY_TESTS, CAUSES_TESTS)
RUNBOOK = REPO / "docs" / "runbook.md"
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
EXACT_ALERTNAME = re.compile(r'alertname\s*=\s*"')


def load(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=YAML_LOADER)


def rules(path: Path) -> list[dict[str, Any]]:
    return [rule for group in load(path)["groups"] for rule in group["rules"]]


def alert_rules() -> list[dict[str, Any]]:
    return rules(PROMETHEUS / "alerts.yml")


def group_names() -> list[str]:
    """Every rule group, in file order: the `group_eval_order` promtool tests need."""
    return [group["name"] for path in RULE_FILES for group in shipped(path)["groups"]]


def assert_promtool_tests_pass(test_file: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="promtool-") as scratch:
        result = run_promtool_tests(test_file, Path(scratch))
    assert 0 == result.returncode, result.stdout + result.stderr


def run_promtool_tests(test_file: Path, scratch: Path) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` on `test_file`, each of its cases a file of its own in `scratch` over only the shipped
    rules it reads (`case_files`): the same verdicts, at a fraction of promtool's work."""
    return subprocess.run([require_tool("promtool"), "test", "rules", *map(str, case_files(test_file, scratch))],
                          capture_output=True, text=True)


def case_files(test_file: Path, scratch: Path) -> list[Path]:
    """`test_file` cut into one test file per case, each over the shipped rules its checks read (whatever
    `test_file`'s own `rule_files`), evaluated in their groups' file order.

    promtool evaluates every rule of its rule files at every step of a case, whatever the case asks of them, and
    each case starts from empty storage. A rule's values depend only on its inputs and on the rules it reads, so a
    case over the rules its checks read, those they read, and so on, gets the verdicts it gets over all of them.
    The 64-rank scenario files ask for a few dozen of some 400 rules (the 172 of the XID catalogue among them)."""
    document = yaml.load(test_file.read_text(), Loader=YAML_LOADER)
    shared = {key: value for key, value in document.items() if key not in ("rule_files", "group_eval_order", "tests")}
    files = []
    for number, case in enumerate(document["tests"]):
        rule_files, groups = rule_files_reading(checked_names(case), scratch)
        (case_file := scratch / f"{test_file.stem}-{number}.yml").write_text(yaml.dump(
            {**shared, "rule_files": [str(path) for path in rule_files], "group_eval_order": groups, "tests": [case]},
            Dumper=YAML_DUMPER, sort_keys=False, width=1 << 20))
        files.append(case_file)
    return files


def checked_names(case: dict[str, Any]) -> set[str]:
    """The alerts a promtool test case checks, and the names its PromQL checks read."""
    names = {check["alertname"] for check in case.get("alert_rule_test", [])}
    return names.union(*(names_read(check["expr"]) for check in case.get("promql_expr_test", [])))


@functools.cache
def names_read(text: str) -> frozenset[str]:
    """Every name in a rule's or a check's text (expression, labels, annotations' template queries), and every
    alert where it reads `ALERTS` without naming one: a superset of the rules it reads."""
    names = set(NAME.findall(text))
    if names & {"ALERTS", "ALERTS_FOR_STATE"} and not EXACT_ALERTNAME.search(text):
        names |= {rule["alert"] for rule in shipped_rules(PROMETHEUS / "alerts.yml")}
    return frozenset(names)


def rules_reading(names: set[str]) -> set[str]:
    """The shipped rules (recorded series and alert names) `names` read, directly or through other rules."""
    texts = shipped_rule_texts()
    kept: set[str] = set()
    pending = names & texts.keys()
    while pending:
        kept.add(name := pending.pop())
        pending |= {read for text in texts[name] for read in names_read(text)} & texts.keys() - kept
    return kept


@functools.cache
def shipped_rule_texts() -> dict[str, list[str]]:
    """Each shipped rule name's rules (expression, labels and annotations), as text."""
    texts: dict[str, list[str]] = {}
    for rule in (rule for path in RULE_FILES for rule in shipped_rules(path)):
        parts = [rule["expr"], *rule.get("labels", {}).values(), *rule.get("annotations", {}).values()]
        texts.setdefault(rule_name(rule), []).append(" ".join(map(str, parts)))
    return texts


def rule_files_reading(names: set[str], scratch: Path) -> tuple[list[Path], list[str]]:
    """`RULE_FILES` written into `scratch` with only the rules `names` read, each group in place, empty ones
    left out (one copy per distinct set of rules); and the names of the groups left, in file order."""
    kept = rules_reading(names)
    tag = hashlib.sha256(" ".join(sorted(kept)).encode()).hexdigest()[:12]
    paths, order = [], []
    for path in RULE_FILES:
        groups = [{**group, "rules": rules} for group in shipped(path)["groups"]
                  if (rules := [rule for rule in group["rules"] if rule_name(rule) in kept])]
        order += [group["name"] for group in groups]
        paths.append(copy := scratch / f"{path.stem}-{tag}.yml")
        if not copy.exists():
            copy.write_text(yaml.dump({"groups": groups}, Dumper=YAML_DUMPER, sort_keys=False, width=1 << 20))
    return paths, order


@functools.cache
def shipped(path: Path) -> Any:
    """A shipped rule file, parsed once (read only: `load` gives a copy to change)."""
    return load(path)


def shipped_rules(path: Path) -> list[dict[str, Any]]:
    """A shipped rule file's rules in file order, from its one parse (read only)."""
    return [rule for group in shipped(path)["groups"] for rule in group["rules"]]


def rule_name(rule: dict[str, Any]) -> str:
    """The series a rule records or the alert it fires."""
    return str(rule.get("record") or rule["alert"])
