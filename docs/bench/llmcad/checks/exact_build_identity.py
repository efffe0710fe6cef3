from coinfer.bench.workloads import build_suite
from coinfer.decoding import SpecConfig
from coinfer.decoding import generate as sgen
from coinfer.engines.llmcad import LLMCadConfig, generate
from coinfer.models import load_model
from coinfer.models.load import budget_load_options

t = load_model("qwen2.5-coder-1.5b", n_ctx=1024, **budget_load_options("target"))
d = load_model("qwen2.5-coder-0.5b", n_ctx=1024, **budget_load_options("draft"))
same = 0
suite = build_suite(2)
for p in suite:
    prompt = t.chat_prompt(p["messages"])
    a = sgen(t, prompt, draft=None, config=SpecConfig(max_tokens=48)).tokens
    b = generate(t, prompt, draft=d, config=LLMCadConfig(max_tokens=48, gate=False)).tokens
    same += a == b
    print(p["id"], a == b, flush=True)
print("identical", same, "of", len(suite))
