"""The first transformers load of a catalogue GGUF (the conversion into <cache>/hf), with
gguf_read_once (on) or without it (off), and the first logits' sum (the same either way).

    rm -rf /tmp/convcache/hf; COINFER_CACHE=/tmp/convcache python gguf_convert.py on|off
    (/tmp/convcache/models: a link to ~/.cache/coinfer/models, so only the conversion runs)
"""
import time, sys
from coinfer.models import load as L
if sys.argv[1] == "off":
    from contextlib import nullcontext
    L.gguf_read_once = nullcontext
t = time.perf_counter()
m = L.load_model("qwen2.5-coder-0.5b", backend="transformers")
print(sys.argv[1], "load with conversion", round(time.perf_counter() - t, 1), "s")
seq = m.new_sequence(); import numpy as np
print("first logits sum", float(np.asarray(m.extend(seq, m.tokenize("def f(x):"))).sum()))
