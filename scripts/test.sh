#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine (as root) and runs it all.
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

python3 -m pip install -q --disable-pip-version-check 'torch==2.13.0' -e '.[test]'
python3 -m ruff check .
python3 -m pytest "$@"
