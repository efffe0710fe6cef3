import sys

from coinfer.bench.workloads import build_suite
from coinfer.decoding import SpecConfig
from coinfer.decoding import generate as sgen
from coinfer.engines.llmcad import LLMCadConfig
from coinfer.engines.llmcad import generate as lgen
from coinfer.models import load_model

t = load_model("qwen2.5-coder-1.5b", n_ctx=2048)
d = load_model("qwen2.5-coder-0.5b", n_ctx=2048)
n = int(sys.argv[1])
per = int(sys.argv[2])
for p in build_suite(per):
    prompt = t.chat_prompt(p["messages"])
    res = {}
    for name in ("auto", "llmcad", "auto2", "llmcad2"):
        if name.startswith("auto"):
            r = sgen(t, prompt, draft="auto", config=SpecConfig(max_tokens=n))
        else:
            r = lgen(t, prompt, draft=d, config=LLMCadConfig(max_tokens=n))
        res[name] = (r.stats.last_token_at - r.stats.first_token_at) / max(1, r.stats.n_tokens - 1)
        if name.startswith("llmcad"):
            modes = r.extras["modes"]
            same = r.tokens
        else:
            ref = r.tokens
    a = (res["auto"] + res["auto2"]) / 2
    llm = (res["llmcad"] + res["llmcad2"]) / 2
    print(
        p["id"][:28],
        f"auto {a * 1000:.1f} ms/tok llmcad {llm * 1000:.1f} ms/tok ratio(auto/llmcad) {a / llm:.3f}",
        modes,
        same == ref,
    )
