"""Jupiter served with tools: the official client gets tool calls from a 2-device pipeline
of qwen2.5-coder-0.5b (transformers), greedy, the one-off's first 8 prompts."""
import json, sys
import openai
sys.path.insert(0, __import__("os").path.dirname(__file__) or ".")
from tool_calls import TOOLS, CASES
from coinfer.serve.process import ServerProcess

proc = ServerProcess("qwen2.5-coder-0.5b", max_batch=2, ctx=2048,
                     extra_args=["--engine", "jupiter", "--devices", "2"], startup_s=600)
with proc:
    client = openai.OpenAI(base_url=proc.url, api_key="unused")
    for prompt, want, args in CASES[:8]:
        r = client.chat.completions.create(model="qwen2.5-coder-0.5b", messages=[{"role": "user", "content": prompt}],
                                           tools=TOOLS, temperature=0, max_tokens=96)
        c = r.choices[0]
        calls = [(t.function.name, json.loads(t.function.arguments)) for t in (c.message.tool_calls or [])]
        print(f"{prompt[:50]!r}: want {want}; finish {c.finish_reason}; calls {calls}; text {(c.message.content or '')[:60]!r}")
