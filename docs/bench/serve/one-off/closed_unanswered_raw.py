"""33 prompts streamed alone, one after another, to llama-server ngram-mod (as the bench's alone pass):
which fail, and with what underlying exception."""
import asyncio, time, traceback
import openai
from coinfer.bench.serve_concurrency import start_system, system_flags
from coinfer.bench.workloads import build_suite
suite = build_suite(11)
kind, flags = system_flags("llama-server-ngram-mod", 0.0)
url, stop = start_system(kind, flags, model="qwen2.5-coder-1.5b", ctx=4096, slots=8)
async def main():
    client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=600)
    for i, p in enumerate(suite):
        t0 = time.perf_counter()
        try:
            chunks = await client.chat.completions.create(model="m", messages=p["messages"], max_tokens=128, temperature=0, stream=True)
            n = 0
            async for c in chunks:
                n += 1
            print(i, "ok", n, f"{time.perf_counter()-t0:.2f}s", flush=True)
        except openai.APIConnectionError as e:
            c = e.__cause__
            print(i, "FAIL after", f"{time.perf_counter()-t0:.3f}s", type(c).__name__, repr(c)[:200], "|", repr(getattr(c, '__cause__', None))[:200], flush=True)
    await client.close()
try:
    asyncio.run(main())
finally:
    stop()
