"""Size budgets that may only shrink: no function over MAX_STATEMENTS statements and no module over MAX_LINES
lines, except those listed below at their size when the budget was set. A new offender fails, and so
does a listed one that grew; one that shrank below the line is taken off the list (the test says so)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("exporter", "bundle", "prometheus", "grafana", "scripts", "deploy")
GENERATED = ("_pb2.py", "_pb2_grpc.py")
MAX_STATEMENTS = 30
MAX_LINES = 500

# function (path:qualified name) -> statements, on 2026-12-07 (after issues 39 and 40 added the hang and work fields)
FUNCTIONS = {
    "exporter/trainmon/cli.py:main": 36,
    "exporter/trainmon/collectors/nccl_inspector.py:NcclInspectorCollector._read_dumps": 37,
    "exporter/trainmon/ingest/ranks.py:RankTable._apply": 45,
    "exporter/trainmon/nvml/device.py:Gpu.read": 32,
    "exporter/trainmon/hook/state.py:RankState.__init__": 37,
    "scripts/gpu_check.py:check_nvml": 41,
}
# module -> lines, on 2026-12-07 (after issues 39 and 40 added the hang and work fields)
MODULES = {
    "exporter/trainmon/collectors/gpu.py": 524,
    "exporter/trainmon/health/xid_catalog.py": 697,
    "exporter/trainmon/wire.py": 605,
    "prometheus/rulegen/alerts.py": 819,
    "exporter/trainmon/torch/_monitor.py": 502,
    "scripts/gpu_check.py": 601,
}


def statements(body: list[ast.stmt]) -> int:
    """Statements in `body`, nested blocks included; a nested function or class counts one (it has its own)."""
    count = 0
    for statement in body:
        count += 1
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for block in ("body", "orelse", "finalbody"):
            count += statements(getattr(statement, block, []))
        for handler in getattr(statement, "handlers", []):
            count += statements(handler.body)
        for case in getattr(statement, "cases", []):
            count += statements(case.body)
    return count


def functions(tree: ast.Module, path: str) -> Iterator[tuple[str, int]]:
    """Every function and method as (path:qualified name, statements)."""
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield f"{path}:{prefix}{child.name}", statements(child.body)
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)
    yield from walk(tree, "")


def sources() -> Iterator[Path]:
    for top in SOURCES:
        yield from (p for p in sorted((REPO / top).rglob("*.py")) if not p.name.endswith(GENERATED))


def measured() -> tuple[dict[str, int], dict[str, int]]:
    """The functions over MAX_STATEMENTS and the modules over MAX_LINES, with their sizes today."""
    large_functions: dict[str, int] = {}
    large_modules: dict[str, int] = {}
    for path in sources():
        name, text = str(path.relative_to(REPO)), path.read_text()
        if (lines := len(text.splitlines())) > MAX_LINES:
            large_modules[name] = lines
        large_functions |= {f: n for f, n in functions(ast.parse(text), name) if n > MAX_STATEMENTS}
    return large_functions, large_modules


def over_budget(sizes: dict[str, int], budget: dict[str, int]) -> dict[str, str]:
    """What is new or grew against `budget`, and what shrank under the line but is still listed."""
    problems = {name: f"{size} (budget {budget.get(name, 'none')})" for name, size in sizes.items()
                if size > budget.get(name, 0)}
    problems |= dict.fromkeys(budget.keys() - sizes.keys(), "under the line now: take it off the list")
    return problems


def test_no_function_grows_past_its_budget() -> None:
    assert {} == over_budget(measured()[0], FUNCTIONS)


def test_no_module_grows_past_its_budget() -> None:
    assert {} == over_budget(measured()[1], MODULES)


def test_a_new_offender_a_grown_one_and_a_shrunk_one_are_named() -> None:
    budget = {"a.py:f": 40, "b.py:g": 35}

    assert {"a.py:f": "41 (budget 40)", "c.py:h": "31 (budget none)",
            "b.py:g": "under the line now: take it off the list"} == over_budget({"a.py:f": 41, "c.py:h": 31}, budget)


def test_statements_count_nested_blocks_but_not_nested_functions() -> None:
    tree = ast.parse("def f(x):\n    if x:\n        y = 1\n    else:\n        y = 2\n"
                     "    def g():\n        return 1\n    return y\n")

    assert [("m.py:f", 5), ("m.py:f.g", 1)] == list(functions(tree, "m.py"))  # if, two assignments, def, return
