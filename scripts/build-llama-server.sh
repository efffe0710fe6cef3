#!/usr/bin/env bash
# Builds llama.cpp's C++ `llama-server` (a benchmark peer) from the llama.cpp sources
# vendored in the pinned llama-cpp-python sdist, into a cache directory, once.
# Prints the binary's path on its last line. About 8 minutes on 2 cores.
set -euo pipefail
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
python="${PYTHON:-python3}"
root="${COINFER_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/coinfer/peers}/llama-server-$version"
bin="$root/build/bin/llama-server"
if [[ -x "$bin" ]]; then echo "$bin"; exit 0; fi
mkdir -p "$root"
"$python" -m pip download --no-deps --no-binary :all: -d "$root" "llama-cpp-python==$version" >&2
tar -xzf "$root"/llama_cpp_python-"$version".tar.gz -C "$root"
src="$root/llama_cpp_python-$version/vendor/llama.cpp"
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
args=(-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release)
if [[ " $flags " == *" amx_int8 "* ]]; then  # the same AMX-free choice as scripts/build-llama-wheel.sh
  args+=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI \
              avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    flag=${pair%%:*} opt=${pair##*:}
    if [[ " $flags " == *" $flag "* ]]; then args+=("-DGGML_${opt}=ON"); else args+=("-DGGML_${opt}=OFF"); fi
  done
fi
cmake -S "$src" -B "$root/build" "${args[@]}" >&2
cmake --build "$root/build" --target llama-server -j "$(nproc)" >&2
echo "$bin"
