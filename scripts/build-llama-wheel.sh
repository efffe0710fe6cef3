#!/usr/bin/env bash
# Builds the pinned llama-cpp-python from source into a wheelhouse, once per machine, and
# prints the wheel's path on stdout (everything else goes to stderr).
#
# The sources are the pinned sdist with coinfer's patches applied (scripts/patches; each
# adds a setting read from the environment whose default is llama.cpp's own behaviour). The
# wheel's version carries a local label naming the patches (0.3.36+coinfer.<hash>), which
# still satisfies the pin `llama-cpp-python==0.3.36`, so a change to the patches builds anew.
#
# llama.cpp's native build turns on every ISA extension the CPU reports. Its AMX kernels
# crash (SIGSEGV in ggml_backend_amx_mul_mat) on virtual machines that report AMX but do
# not grant it, as on this project's build machines. So where the CPU reports AMX we
# build with the same extensions named one by one, AMX left out (llama_cpu_args); weight
# repacking, the main decode speed-up on a CPU, stays on. Elsewhere the build is llama.cpp's
# default.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib/llama-source.sh"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
python="${PYTHON:-python3}"
wheelhouse="${COINFER_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/coinfer/wheels}"
label="coinfer.$(cat "$here"/patches/*.patch | sha256sum | cut -c1-8)"
mkdir -p "$wheelhouse"
for wheel in "$wheelhouse"/llama_cpp_python-"$version+$label"-*.whl; do
  if [[ -f "$wheel" ]]; then
    echo "llama-cpp-python $version+$label: using the wheel in $wheelhouse" >&2
    echo "$wheel"
    exit 0
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
llama_source "$work" "$version" "$python" >/dev/null
sdist="$work/llama_cpp_python-$version"
sed -i "s/^__version__ = \"$version\"$/__version__ = \"$version+$label\"/" "$sdist/llama_cpp/__init__.py"
grep -q "^__version__ = \"$version+$label\"$" "$sdist/llama_cpp/__init__.py" \
  || { echo "llama-cpp-python $version: its version line changed; update $0" >&2; exit 1; }
cmake_args="${CMAKE_ARGS:-$(llama_cpu_args | tr '\n' ' ')}"
echo "building llama-cpp-python $version+$label from source (about 8 minutes on 2 cores)" >&2
[[ -n "${cmake_args// /}" ]] && echo "CMAKE_ARGS=$cmake_args" >&2
CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  "$python" -m pip wheel --no-deps --no-cache-dir -w "$wheelhouse" "$sdist" >&2
ls "$wheelhouse"/llama_cpp_python-"$version+$label"-*.whl
