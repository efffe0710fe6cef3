import sys, time
from openai import OpenAI
from coinfer import catalog
from coinfer.models import load_model
from coinfer.bench.workloads import build_suite
from coinfer.bench.peers import launch_llama_server, llama_server_binary
from coinfer.serve.process import ServerProcess, stop_process

suite = build_suite(per_category=6)
which = sys.argv[1]
if which == "coinfer":
    server = ServerProcess("qwen2.5-coder-1.5b", ctx=4096, max_batch=8, extra_args=["--engine", "plain"]).start()
    url, stop = server.url, server.stop
else:
    proc, base = launch_llama_server(llama_server_binary(), str(catalog.prepare("qwen2.5-coder-1.5b")), [], None, slots=8, ctx=4096)
    url, stop = base + "/v1", lambda: stop_process(proc, 30)
client = OpenAI(base_url=url, api_key="x")
try:
    out = []
    for p in suite:
        t0 = time.perf_counter(); first = None; n = 0
        s = client.chat.completions.create(model="qwen2.5-coder-1.5b", messages=p["messages"], max_tokens=4, temperature=0, stream=True)
        for ch in s:
            if ch.choices and ch.choices[0].delta.content:
                if first is None: first = time.perf_counter() - t0
        out.append(first)
    print(which, f"sum {sum(out):.2f}", " ".join(f"{x:.2f}" for x in out))
finally:
    stop()
