"""Writes every generated file of the repository, in the order they depend on each other; `--check` writes them
into a scratch copy of the checkout instead and names those that differ from the committed ones (exit 1). Either
way it names a `trainmon_*` metric name a generated file holds and trainmon.catalog does not declare (exit 1).

    python scripts/generate.py          # after changing a rule, a dashboard, a flag, a family or the hook's wrapper
    python scripts/generate.py --check  # what tests/test_generate.py runs

Not here: the kubelet stubs (`exporter/trainmon/kubelet/generate.sh`, which needs the pinned grpcio-tools) and
the Xid table (`scripts/generate_xid_catalog.py`, from NVIDIA's published catalog).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Each step reads what the ones before it wrote.
STEPS = (
    ("-m", "bundle"),  # rules, alerts, dashboards, the mixin
    ("deploy/kubernetes/generate.py",),  # the PrometheusRule and the dashboards' ConfigMaps, from those
    ("scripts/configuration_doc.py",),  # docs/configuration.md, from the flag table
    ("scripts/metrics_doc.py",),  # docs/metrics.md's family tables, from trainmon.catalog
    ("-m", "tests.prometheus.sync_unit_tests"),  # the promtool tests' group order and panel links
    ("-m", "tests.prometheus.instability_scenarios"),  # the generated promtool scenarios
    ("-m", "tests.torch.render_wrapper"),  # the hook's wrapper template as mypy checks it
)
# The generated files that name metric families, as globs under the root: every `trainmon_*` name in them must be
# one trainmon.catalog declares.
NAMING = (
    "prometheus/rules.yml",
    "prometheus/alerts.yml",
    "prometheus/tests/causes.test.yml",
    "prometheus/tests/instability.test.yml",
    "grafana/dashboards/*.json",
    "mixin/**/*.libsonnet",
    "deploy/kubernetes/base/prometheusrule.yaml",
    "deploy/kubernetes/base/dashboards/*.json",
    "docs/configuration.md",
    "docs/metrics.md",
)


def generate(root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "exporter"), str(root)])}
    for step in STEPS:
        subprocess.run([sys.executable, *step], cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)


def undeclared_names(root: Path) -> list[str]:
    """`file: name, ...` for each generated file under `root` that names a family the catalogue does not declare."""
    # This checkout's catalogue: the venv's editable install may point at another clone.
    if str(REPO / "exporter") not in sys.path:
        sys.path.insert(0, str(REPO / "exporter"))
    from trainmon.catalog import undeclared

    found = []
    for path in sorted({path for pattern in NAMING for path in root.glob(pattern)}):
        if names := undeclared([path.read_text()]):
            found.append(f"{path.relative_to(root)}: {', '.join(names)}")
    return found


def checkout_files(root: Path) -> list[str]:
    """What git tracks, and what it neither tracks nor ignores (a new file not yet added)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            check=True, capture_output=True).stdout.decode()
    return sorted(name for name in set(listed.split("\0")) if name and (root / name).is_file())


def stale(root: Path) -> tuple[list[str], list[str]]:
    """The files that generating anew would change, add or remove, relative to `root`; and what the generated
    files name that the catalogue does not declare (`undeclared_names`)."""
    files = checkout_files(root)
    with tempfile.TemporaryDirectory(prefix="trainmon-generate-") as scratch:
        copy = Path(scratch)
        for name in files:
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, copy / name)
        generate(copy)
        after = {str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
        changed = [n for n in files if n not in after or not filecmp.cmp(root / n, copy / n, shallow=False)]
        return sorted([*changed, *(after - set(files))]), undeclared_names(copy)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/generate.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a generated file is stale")
    parser.add_argument("--root", type=Path, default=REPO, help=argparse.SUPPRESS)  # the tests' scratch checkouts
    args = parser.parse_args(argv)
    if args.check:
        differing, undeclared = stale(args.root)
    else:
        generate(args.root)
        differing, undeclared = [], undeclared_names(args.root)
    for name in differing:
        print(f"stale: {name}")
    if differing:
        print("run `python scripts/generate.py` and commit what it writes", file=sys.stderr)
    for found in undeclared:
        print(f"undeclared: {found}")
    if undeclared:
        print("a generated file names a metric family trainmon.catalog does not declare: declare it in "
              "exporter/trainmon/catalog/, or fix the name", file=sys.stderr)
    return 1 if differing or undeclared else 0


if __name__ == "__main__":
    sys.exit(main())
