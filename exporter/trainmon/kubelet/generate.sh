#!/bin/sh
# Regenerates api_pb2.py, api_pb2.pyi and api_pb2_grpc.py from api.proto (needs grpcio-tools).
# Run from anywhere; the stubs import each other as trainmon.kubelet.*.
set -eu
exporter="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$exporter"
python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. trainmon/kubelet/api.proto
