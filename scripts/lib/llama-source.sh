# Shared by the llama.cpp build scripts (sourced, not run).
#
# llama_source ROOT VERSION PYTHON: unpacks the llama.cpp sources vendored in the pinned
# llama-cpp-python sdist under ROOT (once), applies coinfer's patches (llama_patch), and
# prints their directory.
# llama_patch SRC: applies scripts/patches/*.patch to the llama.cpp sources in SRC. Each only
# adds a setting read from the environment, whose default is llama.cpp's own behaviour:
# llama-tiled-min-rows.patch reads the least rows the tiled K-quant matmul takes from
# GGML_CPU_TILED_MIN_ROWS (llama.cpp: 8; coinfer sets 16, docs/bench/serve/one-off/tiled_matmul.txt).
# llama_cpu_args: cmake arguments for this CPU, one per line. llama.cpp's native build enables every
# ISA extension the CPU reports; where it reports AMX (whose kernels crash on virtual
# machines that report it without granting it) the extensions are named one by one, AMX
# left out (scripts/build-llama-wheel.sh uses it too).

llama_source() {
  local root=$1 version=$2 python=$3
  local src="$root/llama_cpp_python-$version/vendor/llama.cpp"
  if [[ ! -d "$src" ]]; then
    mkdir -p "$root" || return 1
    "$python" -m pip download --no-deps --no-binary :all: -d "$root" "llama-cpp-python==$version" >&2 || return 1
    tar -xzf "$root"/llama_cpp_python-"$version".tar.gz -C "$root" || return 1
    if ! llama_patch "$src"; then
      rm -rf "$root/llama_cpp_python-$version"  # not left half done for the next run to take
      echo "llama.cpp $version: a patch in scripts/patches does not apply" >&2
      return 1
    fi
  fi
  echo "$src"
}

llama_patch() {
  local src=$1 patches patch
  patches="$(cd "$(dirname "${BASH_SOURCE[0]}")/../patches" && pwd)" || return 1
  for patch in "$patches"/*.patch; do
    # the ceiling keeps git from taking a repository above SRC for the patch's root
    (cd "$src" && GIT_CEILING_DIRECTORIES="$(dirname "$src")" git apply "$patch") >&2 || return 1
  done
}

llama_cpu_args() {
  local flags pair flag opt
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  [[ " $flags " == *" amx_int8 "* ]] || return 0
  printf '%s\n' -DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI \
              avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    flag=${pair%%:*} opt=${pair##*:}
    if [[ " $flags " == *" $flag "* ]]; then echo "-DGGML_${opt}=ON"; else echo "-DGGML_${opt}=OFF"; fi
  done
}
