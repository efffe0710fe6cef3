"""Tool calls through the official client: 16 requests over 5 tools, 11 that need a call
and 5 that do not, each sent alone (greedy, 96 tokens) to each system. Per system and per
half (prompts 0-7: the ones the parser's rules were checked on; 8-15: held out, written
after the parser and not looked at before this run): right calls (the expected tool, its
expected arguments), wrong calls (another tool, or a call where none was wanted), missed
calls (text where a call was wanted), and for coinfer whether the stream gave the same
calls and text as the whole answer. Each system on a server of its own, 2 slots.
Usage: tool_calls.py SYSTEMS [MODEL [OUT.json]]; SYSTEMS: comma-separated of
coinfer (--engine speculative), coinfer-plain, llama-server (--jinja)."""
import json, sys, time

import openai

from coinfer import catalog
from coinfer.bench.peers import launch_llama_server, llama_server_binary
from coinfer.serve.process import ServerProcess, stop_process


def fn(name, description, properties, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


S = {"type": "string"}
TOOLS = [
    fn("get_weather", "Get the current weather in a city",
       {"city": S, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
    fn("search_code", "Search the company's source code", {"query": S, "language": S}, ["query"]),
    fn("run_tests", "Run the test suite at a path and report failures", {"path": S}, ["path"]),
    fn("create_issue", "Open an issue in the bug tracker", {"title": S, "body": S}, ["title"]),
    fn("convert_currency", "Convert an amount of money between currencies",
       {"amount": {"type": "number"}, "from": S, "to": S}, ["amount", "from", "to"]),
]
# (prompt, expected tool or None, {argument: text its value must contain, case-insensitive})
CASES = [
    ("What's the weather like in Paris today?", "get_weather", {"city": "paris"}),
    ("Run the tests in tests/test_parser.py.", "run_tests", {"path": "test_parser.py"}),
    ("How much is 100 US dollars in euros?", "convert_currency", {"amount": "100"}),
    ("Write a Python function that reverses a string.", None, {}),
    ("Search our Go code for uses of context.WithTimeout.", "search_code", {"query": "withtimeout"}),
    ("Open an issue titled 'Crash on empty input' about the parser crashing on empty input.",
     "create_issue", {"title": "crash"}),
    ("What is a Python decorator? One sentence.", None, {}),
    ("Is it cold in Oslo right now?", "get_weather", {"city": "oslo"}),
    # held out
    ("Please convert 250 euros to Japanese yen.", "convert_currency", {"amount": "250"}),
    ("Find where we call parse_config in the Python sources.", "search_code", {"query": "parse_config"}),
    ("Explain the difference between a list and a tuple in Python.", None, {}),
    ("Check whether the tests under tests/serve pass.", "run_tests", {"path": "tests/serve"}),
    ("Tell me the temperature in Tokyo in fahrenheit.", "get_weather", {"city": "tokyo"}),
    ("Write a SQL query that counts the rows of a table named users.", None, {}),
    ("File a bug: the login page returns 500 when the password is empty.", "create_issue", {"title": ""}),
    ("Translate 'good morning' into French.", None, {}),
]
SYSTEMS = {"coinfer": ["--engine", "speculative"], "coinfer-plain": ["--engine", "plain"], "llama-server": ["--jinja"]}


def start(name, model):
    if name.startswith("coinfer"):
        server = ServerProcess(model, ctx=4096, max_batch=2, extra_args=SYSTEMS[name]).start()
        return server.url, server.stop
    proc, base = launch_llama_server(llama_server_binary(), str(catalog.prepare(model)), SYSTEMS[name], None,
                                     slots=2, ctx=4096)
    return base + "/v1", lambda: stop_process(proc, 30.0)


def verdict(expected, args, calls):
    if expected is None:
        return "right" if not calls else "wrong"
    if not calls:
        return "missed"
    name, arguments = calls[0]
    if name != expected:
        return "wrong"
    ok = all(want in str(json.loads(arguments).get(k, "")).lower() for k, want in args.items())
    return "right" if ok else "wrong"


def ask(client, model, prompt, stream):
    kw = dict(model=model, messages=[{"role": "user", "content": prompt}], tools=TOOLS, temperature=0, max_tokens=96)
    if not stream:
        r = client.chat.completions.create(**kw)
        m = r.choices[0].message
        return m.content, [(c.function.name, c.function.arguments) for c in m.tool_calls or []], r.choices[0].finish_reason
    text, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        text += d.content or ""
        for t in d.tool_calls or []:
            c = calls.setdefault(t.index, ["", ""])
            c[0] += t.function.name or ""
            c[1] += t.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return text or None, [tuple(c) for _, c in sorted(calls.items())], finish


def main():
    systems = sys.argv[1].split(",")
    model = sys.argv[2] if len(sys.argv) > 2 else "qwen2.5-coder-1.5b"
    out = sys.argv[3] if len(sys.argv) > 3 else None
    results = {}
    for name in systems:
        url, stop = start(name, model)
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        rows, t0 = [], time.perf_counter()
        try:
            for i, (prompt, expected, args) in enumerate(CASES):
                content, calls, finish = ask(client, model, prompt, False)
                row = {"i": i, "prompt": prompt, "expected": expected, "content": content, "calls": calls,
                       "finish": finish, "verdict": verdict(expected, args, calls)}
                if name.startswith("coinfer"):
                    s_content, s_calls, s_finish = ask(client, model, prompt, True)
                    row["stream_same"] = ([c[0] for c in s_calls], [json.loads(c[1]) for c in s_calls], s_finish,
                                          (s_content or "").strip()) == (
                        [c[0] for c in calls], [json.loads(c[1]) for c in calls], finish, (content or "").strip())
                rows.append(row)
                print(name, i, row["verdict"], finish, calls or repr((content or "")[:70]), flush=True)
        finally:
            stop()
        results[name] = {"rows": rows, "seconds": time.perf_counter() - t0}
        for half, lo, hi in (("tune", 0, 8), ("held out", 8, 16)):
            part = rows[lo:hi]
            counts = {v: sum(r["verdict"] == v for r in part) for v in ("right", "wrong", "missed")}
            same = [r["stream_same"] for r in part if "stream_same" in r]
            print(f"{name} {half}: {counts}" + (f", stream same as whole {sum(same)}/{len(same)}" if same else ""),
                  flush=True)
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
