"""`coinfer serve` on the GPU path: a random-weights Qwen2.5 architecture saved as a model
folder, served by plain batched decoding and by the collective engine (n-gram draft), and
used through HTTP by four concurrent clients whose requests ask for different numbers of
tokens, so that requests finish mid-batch and the batch runs with gaps between its slots.

Each server captures its forward shapes at start (printed on its stderr, kept here). The
clients send the same requests to both, and to a plain server that decodes one request
at a time (the reference); greedy, so every answer should be the reference's text.

    OUT=/tmp/out PYTHONPATH=src python3 docs/bench/decode-cuda/serve.py
    # on a CPU, to try it: ARCH=tiny DEVICE=cpu REQUESTS=4 ... (a two-layer model)
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from coinfer.bench.broad_suite import broad_suite
from coinfer.models.architectures import byte_tokenizer, random_weights_model
from coinfer.serve.process import ServerProcess

ARCH = os.environ.get("ARCH", "qwen2.5-1.5b")
DEVICE = os.environ.get("DEVICE", "cuda")
DTYPE = os.environ.get("DTYPE", "float32")  # bf16 flips near-ties of random weights (README)
REQUESTS = int(os.environ.get("REQUESTS", "16"))
CLIENTS = 4
BUDGETS = (48, 96, 64, 128)  # tokens asked, by request: they finish at different times
KEY = "serve-bench"


def save_model(folder: str) -> None:
    """The architecture with random weights, and the byte tokenizer, as a model folder."""
    if ARCH == "tiny":
        from transformers import AutoModelForCausalLM, Qwen2Config

        config = Qwen2Config(vocab_size=257, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                             eos_token_id=256, tie_word_embeddings=True)  # fmt: skip
        model = AutoModelForCausalLM.from_config(config)
    else:
        model = random_weights_model(ARCH, device=DEVICE, dtype=DTYPE)
    model.save_pretrained(folder)
    whole_vocabulary(byte_tokenizer(), model.config.vocab_size).save_pretrained(folder)


def whole_vocabulary(tok, size: int):  # type: ignore[no-untyped-def]
    """The byte tokenizer with a token ``<i>`` for every id past its 257 up to the model's
    vocabulary: a random model picks ids anywhere in it, and an answer's text then shows
    every id it chose, so two servers' texts are equal only where their tokens are."""
    from tokenizers import AddedToken

    tok.add_tokens([AddedToken(f"<{i}>", normalized=False) for i in range(len(tok), size)])
    return tok


def prompts() -> list[str]:
    suite = broad_suite()
    picked = suite[:: max(1, len(suite) // REQUESTS)][:REQUESTS]
    return ["\n".join(m["content"] for m in p["messages"])[-1500:] for p in picked]


def complete(url: str, prompt: str, max_tokens: int) -> dict:
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(
        url + "/completions", body, {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=600) as answer:
            return json.load(answer)
    except urllib.error.HTTPError as exc:
        raise SystemExit(f"{exc}: {exc.read().decode()[:500]}") from exc


def serve(folder: str, engine: list[str], texts: list[str], batch: int = CLIENTS) -> dict:
    args = ["--backend", "transformers", "--device", DEVICE, "--kv", "static", "--name", "m",
            "--api-key", KEY, *engine]  # fmt: skip
    started = time.perf_counter()
    server = ServerProcess(folder, ctx=4096, max_batch=batch, extra_args=args, startup_s=900).start()
    ready_s = time.perf_counter() - started
    try:
        budgets = [BUDGETS[i % len(BUDGETS)] for i in range(len(texts))]
        complete(server.url, texts[0], 8)  # one warm request, outside the timing
        start = time.perf_counter()
        with ThreadPoolExecutor(CLIENTS) as pool:
            answers = list(pool.map(lambda a: complete(server.url, *a), zip(texts, budgets, strict=True)))
        wall = time.perf_counter() - start
        with urllib.request.urlopen(
            urllib.request.Request(
                server.url.removesuffix("/v1") + "/metrics", headers={"Authorization": f"Bearer {KEY}"}
            )
        ) as m:
            metrics = [line for line in m.read().decode().splitlines() if line and not line.startswith("#")]
    finally:
        server.stop()
    tokens = sum(a["usage"]["completion_tokens"] for a in answers)
    return {
        "engine": " ".join(engine),
        "max_batch": batch,
        "start_s": round(ready_s, 1),
        "server_stderr": [line.rstrip() for line in server._stderr if "captured" in line or "rror" in line][
            -8:
        ],
        "wall_s": round(wall, 3),
        "completion_tokens": tokens,
        "tok_s": round(tokens / wall, 1),
        "texts": [a["choices"][0]["text"] for a in answers],
        "metrics": metrics[:60],
    }


def _first_difference(a: str, b: str) -> int | None:
    """The first token (a character or an ``<i>``) where two answers part, None where equal."""
    ta, tb = re.findall(r"<\d+>|.", a, re.S), re.findall(r"<\d+>|.", b, re.S)
    return next(
        (i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y),
        None if len(ta) == len(tb) else min(len(ta), len(tb)),
    )


def main() -> None:
    folder = tempfile.mkdtemp(prefix="coinfer-serve-")
    t0 = time.perf_counter()
    save_model(folder)
    texts = prompts()
    report = {"arch": ARCH, "device": DEVICE, "dtype": DTYPE, "requests": len(texts), "clients": CLIENTS,
              "budgets": BUDGETS, "save_s": round(time.perf_counter() - t0, 1), "runs": []}  # fmt: skip
    engines = (["--engine", "plain"], ["--engine", "plain"], ["--engine", "collective", "--drafts", "ngram"])
    for engine, batch in zip(engines, (1, CLIENTS, CLIENTS), strict=True):
        report["runs"].append(serve(folder, engine, texts, batch))
        shown = {k: v for k, v in report["runs"][-1].items() if k not in ("texts", "metrics")}
        print(json.dumps(shown), flush=True)
    alone, plain, collective = report["runs"]
    for run in (plain, collective):  # each request's answer decoded alone is the reference
        run["identical_to_alone"] = sum(a == b for a, b in zip(alone["texts"], run["texts"], strict=True))
        run["first_difference"] = [
            _first_difference(a, b) for a, b in zip(alone["texts"], run["texts"], strict=True)
        ]
    report["collective_vs_plain"] = round(collective["tok_s"] / plain["tok_s"], 3)
    same = f"plain {plain['identical_to_alone']}, collective {collective['identical_to_alone']}"
    print(f"identical to alone: {same} of {len(texts)}", flush=True)
    print("collective/plain", report["collective_vs_plain"], flush=True)
    print(
        "first differences (tokens): plain",
        plain["first_difference"],
        "collective",
        collective["first_difference"],
    )
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"serve-{ARCH}-{DTYPE}.json"), "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
