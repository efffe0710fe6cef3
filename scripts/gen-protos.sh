#!/usr/bin/env bash
# Regenerate the protobuf messages of src/coinfer/transport/proto (needs grpcio-tools).
set -euo pipefail
cd "$(dirname "$0")/../src"
python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. coinfer/transport/proto/dragon.proto
