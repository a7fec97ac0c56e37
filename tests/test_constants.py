"""Each constant has one source: no module-level constant of the package is written twice, under the same
name with the same value, in two modules (the hook's `MAX_PHASES` once was, in `wire` and `torch/_state`,
kept equal by hand). A shared constant lives in the lower module and the other imports it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "exporter" / "trainmon"
# Written twice today, each a unit of its own reader's text; none may join them.
KNOWN_TWINS = frozenset({"MS", "MAX_SKIPPED_NOTES"})


def constants(source: str) -> Iterator[tuple[str, str]]:
    """Each module-level `UPPER_CASE = value` as (name, the value's syntax tree); type variables left out."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        is_type_variable = isinstance(value, ast.Call) and ast.unparse(value.func) == "TypeVar"
        for target in targets:
            if isinstance(target, ast.Name) and target.id.lstrip("_").isupper() and not is_type_variable:
                yield target.id, ast.dump(value)


def twins(modules: dict[str, str]) -> dict[str, list[str]]:
    """Constant name -> the modules that write it with the same value, where there are two or more."""
    seen: dict[tuple[str, str], list[str]] = {}
    for module, source in modules.items():
        for key in constants(source):
            seen.setdefault(key, []).append(module)
    return {name: sorted(where) for (name, _), where in seen.items() if len(where) > 1}


def test_no_constant_is_written_twice() -> None:
    modules = {str(path.relative_to(PACKAGE)): path.read_text() for path in sorted(PACKAGE.rglob("*.py"))
               if not path.name.endswith("_pb2.py")}

    found = twins(modules)

    assert {} == {name: where for name, where in found.items() if name not in KNOWN_TWINS}
    assert KNOWN_TWINS == KNOWN_TWINS & found.keys(), "a twin was joined: take it off KNOWN_TWINS"


def test_a_twin_is_found_whatever_its_spelling_of_the_value_but_not_a_namesake() -> None:
    modules = {"wire.py": "MAX_PHASES = 16\nOTHER = 'other'\nT = TypeVar('T')\n",
               "hook/state.py": "MAX_PHASES: int = 16  # the same\nOTHER = 'else'\nT = TypeVar('T')\n"}

    assert {"MAX_PHASES": ["hook/state.py", "wire.py"]} == twins(modules)
