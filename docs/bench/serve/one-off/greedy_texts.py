import json
from coinfer.models import load_model
from coinfer.bench.workloads import build_suite
from coinfer.chat.local import LocalChat
from coinfer.chat.base import ChatRequest
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=4, kv_unified=False, n_threads=2)
suite = build_suite(per_category=11)
chat = LocalChat(model, max_concurrent=1, keep=0)
out = []
for i, p in enumerate(suite):
    ids = model.chat_prompt(p["messages"])
    job = chat.chat(ChatRequest(messages=p["messages"], max_tokens=128, temperature=0.0))
    toks = model.tokenize(job.texts[0]) if hasattr(model, "tokenize") else None
    out.append({"id": p["id"], "prompt": ids, "text": job.texts[0]})
    print(i, flush=True)
json.dump(out, open("greedy_texts.json", "w"))
