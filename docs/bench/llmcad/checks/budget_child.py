import json
import os
import sys

from coinfer.bench.workloads import build_suite
from coinfer.engines.llmcad import LLMCadConfig, generate
from coinfer.models import load_model
from coinfer.models.load import budget_load_options
from coinfer.models.prefetch import resident_anonymous_bytes

budget = int(sys.argv[1])
opts = json.loads(sys.argv[2])
T = json.loads(os.environ.get("TOPTS", "{}"))
D = json.loads(os.environ.get("DOPTS", "{}"))
t = load_model("qwen2.5-coder-1.5b", n_ctx=1024, **{**budget_load_options("target"), **T})
d = load_model("qwen2.5-coder-0.5b", n_ctx=1024, **{**budget_load_options("draft"), **D})
p = [p for p in build_suite(2) if p["id"] == os.environ.get("PID", "HumanEval/0")][0]
prompt = t.chat_prompt(p["messages"])
out = generate(t, prompt, draft=d, config=LLMCadConfig(max_tokens=64, **{"memory_budget": budget, **opts}))
ex = out.extras
print(
    json.dumps(
        {
            "decode_s": round((out.stats.last_token_at - out.stats.first_token_at), 2),
            "anon_MB": resident_anonymous_bytes() >> 20,
            "trees": ex["tree_sizes"],
            "draft_s": ex["draft_s"],
            "verify_s": ex["verify_s"],
            "read_MB": ex["bytes_read"] >> 20,
            "pf_MB": ex["prefetched_bytes"] >> 20,
            "spec": ex["speculative"], "fallbacks": ex["fallbacks"], "alpha": ex["alpha_history"][:8],
        }
    )
)
