#!/usr/bin/env bash
# One command on a GPU machine, from (a copy of) the repository root: checks the hook and the GPU collector
# against the real GPU, driver and NCCL, in at most 8 minutes on one H100, with only what the machine's image
# has (PyTorch with CUDA and NCCL, nvidia-ml-py, prometheus-client, psutil; no network, nothing installed).
#   bash scripts/gpu_check.sh [--only CHECK ...]     # summary: $OUT/gpu_check.json, else ./gpu_check.json
# PYTHON picks the interpreter (default python3). See docs/gpu.md, "Checking on a real GPU".
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/exporter${PYTHONPATH:+:$PYTHONPATH}"
# The script keeps its own 470 s budget and writes its summary; this is the hard stop behind it.
exec timeout -k 5 480 "${PYTHON:-python3}" scripts/gpu_check.py "$@"
