import sys
from coinfer.models import load_model
from coinfer.chat.local import LocalChat
from coinfer.chat.base import ChatRequest
from coinfer.bench.serve_load import load_prompts
mr = int(sys.argv[1]); chunk = int(sys.argv[2]) if len(sys.argv) > 2 else 512
model = load_model("smollm2-135m", n_ctx=2048, n_seq_max=8, kv_unified=False)
reqs = [ChatRequest(messages=[{"role": "user", "content": p}], max_tokens=24, temperature=0.0) for p in load_prompts(32)]
alone = LocalChat(model, max_concurrent=1, keep=0, min_reuse=10**6)
ref = [alone.chat(r).texts[0] for r in reqs]
chat = LocalChat(model, max_concurrent=8, keep=0, min_reuse=mr, prefill_chunk=chunk)
outs = chat.chat_batch(reqs)
diff = [i for i, o in enumerate(outs) if o.texts[0] != ref[i]]
print("min_reuse", mr, "chunk", chunk, "different", diff)
for i in diff[:3]:
    print(repr(ref[i])); print(repr(outs[i].texts[0]))
