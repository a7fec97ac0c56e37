"""The package is a house of one-way floors: no module imports one from a floor above it, and nothing loops.

Every import counts, deferred and TYPE_CHECKING ones too (a deferred import is still an arrow a maintainer
must follow). To place a new module, add its prefix to LAYERS (a module under an existing prefix, such as
collectors/fs.py, is placed already); to let a module be imported from a new place, extend IMPORTED_ONLY_BY.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

EXPORTER = Path(__file__).resolve().parents[1] / "exporter"

# Bottom to top. A module may import modules of its own floor and of the floors below, never above.
LAYERS: tuple[tuple[str, ...], ...] = (
    # leaves: pure parsing, names, codecs of others' formats, dependency internals, hardware stand-ins
    ("trainmon", "trainmon.catalog", "trainmon.parsers", "trainmon.families", "trainmon.flops", "trainmon.compat",
     "trainmon.kubelet", "trainmon.gpu_inventory", "trainmon.simulation"),
    # the types every side shares: errors, the wire format, roots, snapshots, rendering, sysfs records
    ("trainmon.errors", "trainmon.wire", "trainmon.roots", "trainmon.profiles", "trainmon.snapshot",
     "trainmon.webconfig", "trainmon.exposition", "trainmon.sysfs"),
    ("trainmon.settings",),
    # sources and surfaces: NVML, the hook's receiver, HTTP, and the hook itself (training side)
    ("trainmon.nvml", "trainmon.health", "trainmon.fsclients", "trainmon.ingest", "trainmon.http", "trainmon.hook",
     "trainmon.torch"),
    ("trainmon.collectors", "trainmon.integrations"),
    ("trainmon.scheduler",),
    ("trainmon.daemon", "trainmon.diagnose", "trainmon.top"),
    ("trainmon.demo",),
    ("trainmon.cli", "trainmon.__main__"),
)

# Modules that only the listed prefixes may import (their own package always may).
IMPORTED_ONLY_BY: Mapping[str, tuple[str, ...]] = {
    "trainmon.demo": ("trainmon.cli",),
    # the demo builds the simulated node and hands it to the daemon as `NodeResources.nvml`; `--incident` is
    # checked against the catalogue in the demo's own options (`trainmon.demo.options`), and the command line
    # passes the demo its `Plan`: nothing below them (not `Settings`, not a collector) knows the simulation
    "trainmon.simulation": ("trainmon.cli", "trainmon.demo"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(EXPORTER).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted((EXPORTER / "trainmon").rglob("*.py"))}


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def floor_of(module: str) -> int:
    """The floor of the longest prefix that holds `module`."""
    matches = [(len(prefix), floor) for floor, prefixes in enumerate(LAYERS) for prefix in prefixes
               if under(module, prefix)]
    assert matches, f"{module} is on no floor: add it to LAYERS in {__file__}"
    return max(matches)[1]


def imports_of(path: Path) -> Iterator[str]:
    """The trainmon modules `path` imports (for `from a import b`, a.b when that is a module, else a)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if under(alias.name, "trainmon"))
        elif isinstance(node, ast.ImportFrom) and node.module and under(node.module, "trainmon"):
            for alias in node.names:
                yield f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module


GRAPH = {module: set(imports_of(path)) - {module} for module, path in MODULES.items()}


def folder_of(module: str) -> str:
    """trainmon.collectors.gpu -> trainmon.collectors; a top-level file is its own unit."""
    return ".".join(module.split(".")[:2])


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            component.append(node)
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_is_on_a_floor() -> None:
    for module in MODULES:
        floor_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_points_up(module: str) -> None:
    upward = sorted(target for target in GRAPH[module] if floor_of(target) > floor_of(module))

    assert [] == upward, f"{module} (floor {floor_of(module)}) imports from floors above it"


def test_restricted_modules_are_imported_only_from_where_they_are_meant_to_be() -> None:
    wrong = sorted((module, target) for module, targets in GRAPH.items() for target in targets
                   for restricted, allowed in IMPORTED_ONLY_BY.items()
                   if under(target, restricted) and not under(module, restricted)
                   and not any(under(module, prefix) for prefix in allowed))

    assert [] == wrong


def private_to(module: str) -> str | None:
    """The package a `_name` module belongs to alone: trainmon.torch._monitor -> trainmon.torch."""
    parts = module.split(".")
    private = next((i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")), None)
    return None if private is None else ".".join(parts[:private])


def test_a_private_module_is_imported_only_from_its_own_package() -> None:
    wrong = sorted((module, target) for module, targets in GRAPH.items() for target in targets
                   if (owner := private_to(target)) is not None and not under(module, owner))

    assert [] == wrong


def test_no_file_imports_itself_back() -> None:
    assert [] == cycles(GRAPH)


def test_no_folder_imports_itself_back() -> None:
    folders: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        folders.setdefault(folder_of(module), set()).update(folder_of(t) for t in targets)
    for folder, targets in folders.items():
        targets.discard(folder)

    assert [] == cycles(folders)


def test_the_layer_rules_catch_what_they_are_for() -> None:
    """The checks above would see an upward import, a loop, and the demo imported from below."""
    assert floor_of("trainmon.collectors.gpu") > floor_of("trainmon.nvml.session") > floor_of("trainmon.settings")
    assert floor_of("trainmon.demo.runner") > floor_of("trainmon.daemon") > floor_of("trainmon.collectors.fs")
    assert [["a", "b"]] == cycles({"a": {"b"}, "b": {"c", "a"}, "c": set()})
    assert not any(under("trainmon.nvml.session", prefix) for prefix in IMPORTED_ONLY_BY["trainmon.demo"])
    assert ("trainmon.torch", None) == (private_to("trainmon.torch._monitor"), private_to("trainmon.hook.state"))


# The repository around the package: the generators and the scripts, bottom to top. The rules and the
# dashboards share only what sits below both (bundle.config, bundle.links); what composes them sits above.
REPO = EXPORTER.parent
GENERATOR_LAYERS: tuple[tuple[str, ...], ...] = (
    ("trainmon", "bundle", "bundle.config", "bundle.links"),
    ("prometheus.rulegen", "grafana.dashgen"),
    ("bundle.mixin", "bundle.__main__"),
    ("scripts", "deploy"),
)
GENERATOR_ROOTS = ("bundle", "prometheus/rulegen", "grafana/dashgen", "scripts", "deploy")


def repo_module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def repo_imports(path: Path, module: str) -> Iterator[str]:
    """The modules `path` imports, relative imports resolved, by their dotted name from the repository root."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            source = ".".join(part for part in (base, node.module or "") if part)
            for alias in node.names:  # `from . import hang`: the module hang, where it is one
                yield f"{source}.{alias.name}" if f"{source}.{alias.name}" in GENERATOR_MODULES else source


GENERATOR_MODULES = {repo_module(p): p for root in GENERATOR_ROOTS for p in sorted((REPO / root).rglob("*.py"))}
GENERATOR_GRAPH = {
    module: {target for target in repo_imports(path, module)
             if target.split(".")[0] in {"trainmon", "bundle", "prometheus", "grafana", "scripts", "deploy"}} - {module}
    for module, path in GENERATOR_MODULES.items()
}


def generator_floor(module: str) -> int:
    matches = [(len(prefix), floor) for floor, prefixes in enumerate(GENERATOR_LAYERS) for prefix in prefixes
               if under(module, prefix)]
    assert matches, f"{module} is on no floor: add it to GENERATOR_LAYERS in {__file__}"
    return max(matches)[1]


def test_the_generators_imports_point_down_and_never_between_rules_and_dashboards() -> None:
    upward = sorted((module, target) for module, targets in GENERATOR_GRAPH.items() for target in targets
                    if generator_floor(target) > generator_floor(module))
    across = sorted((module, target) for module, targets in GENERATOR_GRAPH.items() for target in targets
                    if {module.split(".")[0], target.split(".")[0]} == {"prometheus", "grafana"})

    assert ([], []) == (upward, across)
    assert {"bundle.mixin", "bundle.__main__"} <= GENERATOR_GRAPH.keys()


def test_no_generator_module_imports_itself_back() -> None:
    assert [] == cycles(GENERATOR_GRAPH)
