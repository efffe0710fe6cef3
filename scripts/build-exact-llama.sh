#!/usr/bin/env bash
# Builds llama.cpp's libraries, from the sources vendored in the pinned llama-cpp-python,
# with every CPU kernel that rounds a batch of tokens differently from one token turned
# off (llamafile sgemm, weight repacking), into a cache directory, once. With it,
# greedy speculative output is byte-identical to plain decoding, at a cost in speed
# (README, "Speculative decoding"). About 2 minutes on 2 cores. The sources are
# shared with scripts/build-llama-server.sh's cache.
#
# Prints, on its last line, the environment to run with:
#   eval "$(scripts/build-exact-llama.sh)"
set -euo pipefail
source "$(dirname "$0")/lib/llama-source.sh"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
python="${PYTHON:-python3}"
cache="${COINFER_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/coinfer/peers}"
root="$cache/llama-exact-$version"
lib="$root/build/bin"
if [[ ! -e "$lib/libllama.so" ]]; then
  src=$(llama_source "$cache/llama-server-$version" "$version" "$python")
  mapfile -t cpu < <(llama_cpu_args)
  cmake -S "$src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_LLAMAFILE=OFF -DGGML_CPU_REPACK=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_COMMON=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF "${cpu[@]}" >&2
  cmake --build "$root/build" --target llama -j "$(nproc)" >&2
fi
# the library llama-cpp-python loads; tiled K-quant matmuls (batches of 8 or more) off;
# no repacked weights
echo "export LLAMA_CPP_LIB_PATH=$lib GGML_CPU_TILED_MM=0 COINFER_LLAMA_EXTRA_BUFFERS=0"
