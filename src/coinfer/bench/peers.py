"""The peers users would pick instead of coinfer, run on the same prompts and target.

* ``llama-cpp-python-prompt-lookup``: ``Llama(draft_model=LlamaPromptLookupDecoding())``.
* ``transformers-assisted``: Hugging Face assisted generation on the CPU,
  ``model.generate(assistant_model=<qwen2.5-coder-0.5b>)``, both models de-quantized
  from the same GGUF files (so its greedy text can differ from llama.cpp's). It is slow,
  so it runs on the first prompt of each category only.
* ``llama-server-plain``: the C++ server without speculation, which separates what the
  C++ loop saves from what drafting saves.
* ``llama-server-ngram-mod``, ``llama-server-ngram-simple``, ``llama-server-draft-simple``:
  llama.cpp's own C++ server (``--spec-type …``; draft-simple drafts with
  qwen2.5-coder-0.5b), a real process on loopback spoken to over HTTP. Its decode rate
  is the server's own ``timings.predicted_per_second``, so HTTP costs nothing. The binary
  is built from the llama.cpp sources in the pinned llama-cpp-python sdist by
  ``scripts/build-llama-server.sh`` (``--build-peers``), into the cache directory.

Each peer is a callable ``(prompt ids, max_tokens) -> Run`` with a ``close()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coinfer import catalog
from coinfer.decoding import DecodeStats
from coinfer.errors import ConfigError, ModelError
from coinfer.models.llamacpp_tiled import TILED_MIN_ROWS_ENV
from coinfer.serve.process import stop_process
from coinfer.transport.ports import free_loopback_port

__all__ = [
    "DRAFT_PEERS",
    "PEERS",
    "SLOW_PEERS",
    "Peer",
    "Run",
    "draft_for",
    "llama_server_binary",
    "peer_env",
    "start_peer",
    "transformers_assisted",
]

SERVER_PEERS = {
    "llama-server-plain": [],
    "llama-server-ngram-mod": ["--spec-type", "ngram-mod"],
    "llama-server-ngram-simple": ["--spec-type", "ngram-simple"],
    "llama-server-draft-simple": ["--spec-type", "draft-simple"],  # plus -md: the 0.5B draft
}
PEERS = ("llama-cpp-python-prompt-lookup", "transformers-assisted", *SERVER_PEERS)
REMEMBERING_PEERS = {"llama-server-ngram-mod"}  # one n-gram pool for all requests (llama.cpp docs)
SLOW_PEERS = {"transformers-assisted"}  # run on the first prompt of each category only
DRAFT_PEERS = {"transformers-assisted", "llama-server-draft-simple"}  # need the target's catalogue draft
_SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"


@dataclass
class Run:
    tokens: list[int]
    decode_tps: float
    e2e_tps: float
    drafted: int | None = None  # draft tokens sent to verification, where the system says
    accepted: int | None = None
    # where the time went, where the system says: coinfer's milliseconds per round by
    # phase; llama-server's own ``timings`` (ms per token, drafts)
    timings: dict[str, float] | None = None


def timed_run(tokens: Iterator[int], start: float) -> Run:
    """Collect tokens with their arrival times (decode rate: first to last token)."""
    stats = DecodeStats(start=start)
    out = []
    for t in tokens:
        out.append(t)
        stats.emitted(1)
    return Run(out, stats.decode_tokens_per_s, stats.tokens_per_s)


_SERVER_TIMINGS = ("predicted_n", "predicted_ms", "predicted_per_token_ms", "draft_n", "draft_n_accepted")


class Peer:
    """A running peer: call it with (prompt, max_tokens); close it when done.

    ``remembers``: it keeps what earlier requests produced and drafts from it (llama-server's
    ``ngram-mod`` shares one n-gram pool across requests), so a prompt run again would be
    drafted from its own earlier answer: the benchmark counts only its first run."""

    def __init__(
        self,
        run: Callable[[list[int], int], Run],
        close: Callable[[], None] = lambda: None,
        *,
        remembers: bool = False,
    ) -> None:
        self._run, self.close, self.remembers = run, close, remembers

    def __call__(self, prompt: list[int], max_tokens: int) -> Run:
        return self._run(prompt, max_tokens)


def llama_server_binary(*, build: bool = False) -> Path | None:
    """The cached llama-server binary; with ``build`` it is built first if missing."""
    return built_binary("build-llama-server.sh", "llama-server", "llama-server", build=build)


def built_binary(script: str, folder: str, name: str, *, build: bool = False) -> Path | None:
    """``name`` as ``scripts/<script>`` builds it under the peers' cache
    (``<folder>-<llama-cpp-python version>/build/bin``); with ``build`` built first if missing."""
    from importlib.metadata import version

    root = Path(os.environ.get("COINFER_PEERS") or catalog.cache_dir() / "peers")
    release = version("llama-cpp-python").split("+")[0]  # a local label (+coinfer.…) names our patches
    binary = root / f"{folder}-{release}" / "build" / "bin" / name
    if binary.is_file() or not build:
        return binary if binary.is_file() else None
    path = _SCRIPTS / script
    if not path.is_file():
        raise ConfigError(f"{path} is missing: build peers from a coinfer checkout")
    env = {**os.environ, "COINFER_PEERS": str(root), "LLAMA_CPP_PYTHON_VERSION": release}
    subprocess.run(["bash", str(path)], check=True, env=env)
    return binary if binary.is_file() else None


def draft_for(target: str) -> str | None:
    """The catalogue's same-vocabulary draft for ``target``, if it has one."""
    return catalog.CATALOG[target].draft if target in catalog.CATALOG else None


def start_peer(
    name: str, *, target: str, model_path: str, eos: frozenset[int], n_threads: int | None
) -> Peer:
    if name in DRAFT_PEERS and draft_for(target) is None:
        raise ConfigError(f"{name} needs a draft model with {target}'s vocabulary and the catalogue has none")
    if name == "llama-cpp-python-prompt-lookup":
        return _prompt_lookup(model_path, n_threads, eos)
    if name == "transformers-assisted":
        return transformers_assisted(target, str(draft_for(target)), n_threads, eos)
    binary = llama_server_binary()
    if binary is None:
        raise ModelError(
            f"{name}: llama-server is not built", hint="run the bench with --build-peers (about 8 minutes)"
        )
    extra = SERVER_PEERS[name]
    if name == "llama-server-draft-simple":
        extra = [*extra, "-md", str(catalog.prepare(str(draft_for(target))))]
    return _llama_server(binary, model_path, extra, n_threads, eos, remembers=name in REMEMBERING_PEERS)


def _prompt_lookup(model_path: str, n_threads: int | None, eos: frozenset[int]) -> Peer:
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    # logits_all=True by hand: with a draft model llama-cpp-python keeps every row's logits
    # but sizes their buffer by the argument (n_batch rows when False), so a context past
    # n_batch tokens overran it ("could not broadcast") on most prompts
    llm = llama_cpp.Llama(
        model_path=model_path, n_ctx=4096, n_threads=n_threads, verbose=False, logits_all=True,
        draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10),
    )  # fmt: skip

    def run(prompt: list[int], max_tokens: int) -> Run:
        def tokens() -> Iterator[int]:
            for n, t in enumerate(llm.generate(prompt, temp=0.0, top_k=1, reset=True)):
                if t in eos or n >= max_tokens:
                    return
                yield int(t)

        return timed_run(tokens(), time.perf_counter())

    return Peer(run, llm.close)


def post_json(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def peer_env() -> dict[str, str]:
    """The environment a llama.cpp peer process runs in: this one's, without the tiled-kernel
    threshold coinfer sets for itself, so that the peer takes llama.cpp's own kernel choice as
    its users run it."""
    return {k: v for k, v in os.environ.items() if k != TILED_MIN_ROWS_ENV}


def launch_llama_server(
    binary: Path, model_path: str, extra: list[str], n_threads: int | None, *, prefix: Sequence[str] = (),
    slots: int = 1, ctx: int = 4096,
) -> tuple[subprocess.Popen[bytes], str]:  # fmt: skip
    """A llama-server on loopback (run under ``prefix``, e.g. ``taskset``), once healthy:
    the process and its base URL. ``slots``: requests it decodes at once (``-np``), each
    with a window of ``ctx`` tokens (its ``-c`` is the slots' total)."""
    port = free_loopback_port()
    threads = str(n_threads or os.cpu_count() or 1)
    cmd = [*prefix, str(binary), "-m", model_path, "--host", "127.0.0.1", "--port", str(port),
           "-c", str(ctx * slots), "-t", threads, "-tb", threads, "-np", str(slots), "-fa", "off",
           *extra]  # fmt: skip
    # its log goes to a file: a pipe nobody reads fills after a few dozen requests, and the
    # server then blocks on its next log line (a concurrency bench's llama-server hung so)
    log = tempfile.TemporaryFile()  # noqa: SIM115 (open as long as the server runs)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=peer_env())
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log.seek(0)
            raise ModelError(f"llama-server did not start: {log.read().decode(errors='replace')[-400:]}")
        time.sleep(0.3)
    return proc, base


def _llama_server(
    binary: Path,
    model_path: str,
    extra: list[str],
    n_threads: int | None,
    eos: frozenset[int],
    *,
    remembers: bool = False,
) -> Peer:
    proc, base = launch_llama_server(binary, model_path, extra, n_threads)

    def run(prompt: list[int], max_tokens: int) -> Run:
        body = {"prompt": prompt, "n_predict": max_tokens, "temperature": 0.0, "top_k": 1,
                "cache_prompt": False, "return_tokens": True}  # fmt: skip
        out = post_json(base + "/completion", body, timeout=600)
        tokens = [int(t) for t in out.get("tokens", []) if int(t) not in eos]
        timings: dict[str, float] = out["timings"]
        total_s = (timings["prompt_ms"] + timings["predicted_ms"]) / 1000
        drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
        return Run(
            tokens,
            float(timings["predicted_per_second"]),
            len(tokens) / total_s if total_s else 0.0,
            None if drafted is None else int(drafted),
            None if accepted is None else int(accepted),
            {k: round(float(v), 3) for k, v in timings.items() if k in _SERVER_TIMINGS},
        )

    return Peer(run, lambda: stop_process(proc), remembers=remembers)


def transformers_assisted(target: str, draft: str, n_threads: int | None, eos: frozenset[int]) -> Peer:
    from coinfer.models import load_model
    from coinfer.models.hf import HFModel, import_torch

    big = load_model(target, backend="transformers", n_threads=n_threads)
    small = load_model(draft, backend="transformers", n_threads=n_threads)
    if not (isinstance(big, HFModel) and isinstance(small, HFModel)):  # pragma: no cover
        raise ModelError(f"{target} and {draft} did not load on transformers")
    torch = import_torch()

    def run(prompt: list[int], max_tokens: int) -> Run:
        streamer = _TokenTimer()
        with torch.inference_mode():
            big.model.generate(
                torch.tensor([prompt], device=big.device),
                attention_mask=torch.ones((1, len(prompt)), dtype=torch.long, device=big.device),
                assistant_model=small.model,
                max_new_tokens=max_tokens,
                do_sample=False,
                eos_token_id=sorted(eos),
                pad_token_id=min(eos),
                streamer=streamer,
            )
        tokens = [t for t in streamer.tokens if t not in eos]
        return Run(tokens, streamer.stats.decode_tokens_per_s, streamer.stats.tokens_per_s)

    def close() -> None:
        big.close()
        small.close()

    return Peer(run, close)


class _TokenTimer:
    """A transformers streamer that times each new token (the first ``put`` is the prompt)."""

    def __init__(self) -> None:
        self.stats = DecodeStats(start=time.perf_counter())
        self.tokens: list[int] = []
        self._prompt_seen = False

    def put(self, value: Any) -> None:
        ids = [int(t) for t in value.reshape(-1).tolist()]
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        for t in ids:
            self.tokens.append(t)
            self.stats.emitted(1)

    def end(self) -> None:
        return None
