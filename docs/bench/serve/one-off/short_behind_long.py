"""A short request sent while a long prompt is being read: each one's time to first token,
served by coinfer serve (plain engine, qwen2.5-coder-1.5b, 8 slots). Run with the code to
measure on PYTHONPATH; argv[1] labels the run, argv[2] how many rounds."""
import sys, threading, time
from openai import OpenAI
from coinfer.bench.workloads import humaneval_problems
from coinfer.serve.process import ServerProcess

label, rounds = sys.argv[1], int(sys.argv[2])
problems = [p["prompt"] for p in humaneval_problems()]


def first_token(client, text, out, key):
    t0 = time.perf_counter()
    s = client.chat.completions.create(model="qwen2.5-coder-1.5b", messages=[{"role": "user", "content": text}],
                                       max_tokens=8, temperature=0, stream=True)
    for ch in s:
        if ch.choices and ch.choices[0].delta.content and key not in out:
            out[key] = time.perf_counter() - t0


server = ServerProcess("qwen2.5-coder-1.5b", ctx=8192, max_batch=8, extra_args=["--engine", "plain"]).start()
client = OpenAI(base_url=server.url, api_key="x")
try:
    first_token(client, "hi", {}, "warm")
    for r in range(rounds):
        long = "Summarise what these functions do.\n\n" + "\n".join(problems[20 * r: 20 * r + 20])
        short = f"Complete this Python function.\n\n```python\n{problems[100 + r]}```"
        out = {}
        t = threading.Thread(target=first_token, args=(client, long, out, "long"))
        t.start()
        time.sleep(1.5)  # the long prompt's read is under way
        first_token(client, short, out, "short")
        t.join()
        print(label, r, f"long {out['long']:.2f} s, short {out['short']:.2f} s (sent 1.5 s later)", flush=True)
finally:
    server.stop()
