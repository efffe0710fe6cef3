#!/usr/bin/env bash
# Builds the pinned llama-cpp-python from source into a wheelhouse, once per machine.
#
# llama.cpp's native build turns on every ISA extension the CPU reports. Its AMX kernels
# crash (SIGSEGV in ggml_backend_amx_mul_mat) on virtual machines that report AMX but do
# not grant it, as on this project's build machines. So where the CPU reports AMX we
# build with the same extensions named one by one, AMX left out; weight repacking, the
# main decode speed-up on a CPU, stays on. Elsewhere the build is llama.cpp's default.
set -euo pipefail
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
python="${PYTHON:-python3}"
wheelhouse="${COINFER_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/coinfer/wheels}"
mkdir -p "$wheelhouse"
if ls "$wheelhouse"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
  echo "llama-cpp-python $version: using the wheel in $wheelhouse"
  exit 0
fi
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { [[ " $flags " == *" $1 "* ]]; }
cmake_args="${CMAKE_ARGS:-}"
if [[ -z "$cmake_args" ]] && has amx_int8; then
  cmake_args="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI \
              avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    flag=${pair%%:*} opt=${pair##*:}
    if has "$flag"; then cmake_args+=" -DGGML_${opt}=ON"; else cmake_args+=" -DGGML_${opt}=OFF"; fi
  done
fi
echo "building llama-cpp-python $version from source (about 8 minutes on 2 cores)"
[[ -n "$cmake_args" ]] && echo "CMAKE_ARGS=$cmake_args"
CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  "$python" -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python \
  -w "$wheelhouse" "llama-cpp-python==$version"
