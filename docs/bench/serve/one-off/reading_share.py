"""How much of an in-process run at CLIENTS requests reads prompts: the speculative engine as
coinfer serve builds it (n-gram, batch floor 0, the gate) or plain, over build_suite(PER), greedy, 128
tokens; steps that read a prompt chunk against steps that only decode. CHUNK sets --prefill-chunk. Run one MODE per process
(a second mode in the same process reuses the first's kept caches). python reading_share.py 4 6 spec"""
import sys, collections
from coinfer.chat.local import open_local_chat, LocalChat
from coinfer.chat.base import ChatRequest
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.bench.workloads import build_suite
from in_flight import run_in_flight
clients = int(sys.argv[1]); per = int(sys.argv[2]); modes = sys.argv[3].split(",")
chat = open_local_chat("qwen2.5-coder-1.5b", n_ctx=4096)
import os
chat.prefill_chunk = int(os.environ.get("CHUNK", chat.prefill_chunk))  # the server's --prefill-chunk
model = chat.model
suite = build_suite(per_category=per)
chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
flag = {"read": 0}
opc = LocalChat._prompt_chunks
def pc(self, running):
    out = opc(self, running); flag["read"] = sum(len(ids) for _, ids in out); return out
LocalChat._prompt_chunks = pc
costs = target_costs(model, Learned())
for mode in modes:
    chat.speculator = BatchSpeculator.over(NgramDrafter(), costs, batch_floor=0.0)
    acc = collections.defaultdict(float); cnt = collections.Counter()
    def on_step(dt):  # the step just run read a prompt chunk where _prompt_chunks gave one
        k = "read" if flag["read"] else "decode"
        acc[k] += dt; cnt[k] += 1; acc["read_tokens"] += flag["read"]; flag["read"] = 0
    jobs, wall, _ = run_in_flight(chat, suite, clients, speculate=mode == "spec", on_step=on_step)
    t = sum(len(j.tokens) for j in jobs)
    print("cached", [j.cached for j in jobs], "prompt", sum(len(j.prompt) for j in jobs))
    print(f"{mode}: {t/wall:.2f} tok/s ({t} in {wall:.1f}s); reading steps {cnt['read']} {acc['read']:.1f}s ({acc['read_tokens']:.0f} prompt tokens); decoding steps {cnt['decode']} {acc['decode']:.1f}s -> {t/acc['decode']:.1f} tok/s decoding-only (first tokens come from reading steps too)", flush=True)
