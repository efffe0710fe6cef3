import sys, time, json
from coinfer import catalog
from coinfer.models import load_model
from coinfer.bench.workloads import build_suite
from coinfer.bench.peers import launch_llama_server, llama_server_binary, post_json
from coinfer.serve.process import stop_process

suite = build_suite(per_category=6)
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=10, kv_unified=False, n_threads=2)
print("extra buffers", model.extra_buffers)
prompts = [model.chat_prompt(p["messages"]) for p in suite]
print("lengths", [len(p) for p in prompts])
proc, base = launch_llama_server(llama_server_binary(), str(catalog.prepare("qwen2.5-coder-1.5b")), [], 2, slots=8, ctx=4096)
try:
    for rep in range(2):
        tc = tl = 0.0
        for ids in prompts:
            seq = model.new_sequence()
            t0 = time.perf_counter(); model.extend_many_greedy([(seq, ids)]); tc += time.perf_counter() - t0
            model.release(seq)
            r = post_json(base + "/completion", {"prompt": ids, "n_predict": 1, "cache_prompt": False, "temperature": 0}, 120)
            tl += r["timings"]["prompt_ms"] / 1000
        print(f"rep {rep}: coinfer {tc:.2f}s llama-server {tl:.2f}s ratio {tc/tl:.3f}", flush=True)
finally:
    stop_process(proc, 30)
