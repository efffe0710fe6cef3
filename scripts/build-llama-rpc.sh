#!/usr/bin/env bash
# Builds llama.cpp's RPC backend peer for `coinfer bench jupiter`: `ggml-rpc-server` (one per
# device) and a `llama-server` that offloads layers to them (`--rpc HOST:PORT,…`), from the
# llama.cpp sources vendored in the pinned llama-cpp-python sdist, into a cache directory,
# once. Prints the build's bin directory on its last line. About 10 minutes on 2 cores.
set -euo pipefail
source "$(dirname "$0")/lib/llama-source.sh"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
python="${PYTHON:-python3}"
root="${COINFER_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/coinfer/peers}/llama-rpc-$version"
bin="$root/build/bin"
if [[ -x "$bin/ggml-rpc-server" && -x "$bin/llama-server" ]]; then echo "$bin"; exit 0; fi
src=$(llama_source "$root" "$version" "$python")
mapfile -t cpu < <(llama_cpu_args)
cmake -S "$src" -B "$root/build" -DGGML_RPC=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release "${cpu[@]}" >&2
cmake --build "$root/build" --target ggml-rpc-server llama-server -j "$(nproc)" >&2
echo "$bin"
