"""Multi-turn chats with think time: CLIENTS conversations at once, each TURNS turns, each
client waiting THINK seconds between a reply and its next question (a user reading, an agent
running a tool), 8 slots a server. Turn 1 is a prompt of the serve bench's suite; later turns
ask short follow-ups over the whole history. Per system: median time to first token of turn 1
and of the later turns, prompt tokens the server said it took from a cache (coinfer:
usage.prompt_tokens_details.cached_tokens; llama-server: timings.cache_n), completion tokens
per second over the run. Each system on a server of its own, one after another.
Usage: [OFFSET=N] multiturn.py SYSTEMS [CLIENTS TURNS THINK MAX_TOKENS [OUT.json]]; OFFSET: the suite's
prompt that opens the first conversation (default 0).
SYSTEMS: comma-separated of coinfer-nostore, coinfer, llama-server-ngram-mod, llama-server-plain."""
import asyncio, json, os, statistics, sys, time

import openai

from coinfer import catalog
from coinfer.bench.peers import launch_llama_server, llama_server_binary
from coinfer.bench.workloads import build_suite
from coinfer.serve.process import ServerProcess, stop_process

MODEL, SLOTS, CTX = "qwen2.5-coder-1.5b", 8, 4096
FOLLOW_UPS = ["Now add type hints and a docstring.", "Write three unit tests for it.", "Explain it briefly."]
SYSTEMS = {
    "coinfer-nostore": ("coinfer", ["--engine", "speculative", "--cache-ram", "0"]),
    "coinfer": ("coinfer", ["--engine", "speculative"]),
    "llama-server-ngram-mod": ("llama-server", ["--spec-type", "ngram-mod"]),
    "llama-server-plain": ("llama-server", []),
}


def start(name):
    kind, flags = SYSTEMS[name]
    if kind == "coinfer":
        server = ServerProcess(MODEL, ctx=CTX, max_batch=SLOTS, extra_args=flags).start()
        return server.url, server.stop
    proc, base = launch_llama_server(llama_server_binary(), str(catalog.prepare(MODEL)), flags, None, slots=SLOTS, ctx=CTX)
    return base + "/v1", lambda: stop_process(proc, 30.0)


async def turn(client, messages, max_tokens):
    t0 = time.perf_counter(); first = None; text = ""; cached = None; prompt = None; tokens = 0
    chunks = await client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=max_tokens,
                                                  stream=True, stream_options={"include_usage": True})
    async for c in chunks:
        if c.choices and c.choices[0].delta.content:
            first = first if first is not None else time.perf_counter() - t0
            text += c.choices[0].delta.content
        if c.usage is not None:
            tokens, prompt = c.usage.completion_tokens, c.usage.prompt_tokens
            details = c.usage.prompt_tokens_details
            cached = details.cached_tokens if details is not None and details.cached_tokens is not None else cached
        timings = (c.model_extra or {}).get("timings")
        if timings and "cache_n" in timings:
            cached = timings["cache_n"]
    return {"ttft": first, "text": text, "cached": cached, "prompt": prompt, "tokens": tokens}


async def conversation(client, opening, turns, think, max_tokens):
    messages, out = list(opening), []
    for t in range(turns):
        r = await turn(client, messages, max_tokens)
        out.append(r)
        messages += [{"role": "assistant", "content": r["text"]}, {"role": "user", "content": FOLLOW_UPS[t % len(FOLLOW_UPS)]}]
        if t < turns - 1:
            await asyncio.sleep(think)
    return out


async def run(url, openings, turns, think, max_tokens):
    client = openai.AsyncOpenAI(base_url=url, api_key="x", timeout=3600, max_retries=0)
    t0 = time.perf_counter()
    convs = await asyncio.gather(*[conversation(client, o, turns, think, max_tokens) for o in openings])
    wall = time.perf_counter() - t0
    await client.close()
    return convs, wall


def main():
    names = sys.argv[1].split(",")
    clients, turns, think, max_tokens = (int(sys.argv[2]) if len(sys.argv) > 2 else 12, int(sys.argv[3]) if len(sys.argv) > 3 else 3,
                                         float(sys.argv[4]) if len(sys.argv) > 4 else 5.0, int(sys.argv[5]) if len(sys.argv) > 5 else 96)
    suite = build_suite(per_category=11)
    offset = int(os.environ.get("OFFSET", "0"))
    openings = [suite[(offset + i) % len(suite)]["messages"] for i in range(clients)]
    report = {}
    for name in names:
        url, stop = start(name)
        try:
            convs, wall = asyncio.run(run(url, openings, turns, think, max_tokens))
        finally:
            stop()
        firsts = [c[0]["ttft"] for c in convs]
        later = [r["ttft"] for c in convs for r in c[1:]]
        cached = [r["cached"] or 0 for c in convs for r in c[1:]]
        prompts = [r["prompt"] or 0 for c in convs for r in c[1:]]
        tokens = sum(r["tokens"] for c in convs for r in c)
        row = {"wall_s": round(wall, 1), "tok_s": round(tokens / wall, 2), "ttft_turn1_p50": round(statistics.median(firsts), 2),
               "ttft_later_p50": round(statistics.median(later), 2), "ttft_later_p90": round(sorted(later)[int(0.9 * (len(later) - 1))], 2),
               "later_prompt_tokens": sum(prompts), "later_cached_tokens": sum(cached),
               "texts": [[r["text"] for r in c] for c in convs]}
        report[name] = row
        print(f"{name}: wall {row['wall_s']} s, {row['tok_s']} tok/s, TTFT turn 1 p50 {row['ttft_turn1_p50']} s, "
              f"later turns p50 {row['ttft_later_p50']} s p90 {row['ttft_later_p90']} s, later turns' prompt tokens "
              f"{row['later_prompt_tokens']}, cached {row['later_cached_tokens']}", flush=True)
    if len(sys.argv) > 6:
        json.dump(report, open(sys.argv[6], "w"))


main()
