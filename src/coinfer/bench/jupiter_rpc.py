"""llama.cpp's RPC backend: the peer a user would pick today to serve one model from two
devices (``coinfer bench jupiter``'s peer).

Each device runs ``ggml-rpc-server`` pinned to its core (1 thread), and a ``llama-server``
pinned to core 0 offloads every layer to them (``--rpc``, ``-ngl 99``), split by the
servers' free memory, llama.cpp's own split. Against it: the same ``llama-server`` alone on
core 0. Both read the catalogue's GGUF (quantized, where coinfer's pipeline runs the
de-quantized float32 model), so the figures that compare are each system's ratio to its
own one device, not their absolute times. Built by ``scripts/build-llama-rpc.sh`` from the
llama.cpp sources vendored in the pinned llama-cpp-python.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coinfer import catalog
from coinfer.bench.peers import built_binary, launch_llama_server, peer_env, post_json
from coinfer.errors import ModelError
from coinfer.transport.ports import free_loopback_port

__all__ = ["rpc_binaries", "run_rpc_peer"]

SCRIPT, FOLDER = "build-llama-rpc.sh", "llama-rpc"


def rpc_binaries(*, build: bool = False) -> tuple[Path, Path] | None:
    """The RPC build's ``llama-server`` and ``ggml-rpc-server`` (built first with ``build``)."""
    server = built_binary(SCRIPT, FOLDER, "llama-server", build=build)
    rpc = built_binary(SCRIPT, FOLDER, "ggml-rpc-server")
    return (server, rpc) if server is not None and rpc is not None else None


def _rpc_server(binary: Path, core: int) -> tuple[subprocess.Popen[bytes], str]:
    """One device: ``ggml-rpc-server`` on loopback, pinned to ``core``, once it listens."""
    port = free_loopback_port()
    cmd = ["taskset", "-c", str(core), str(binary), "-H", "127.0.0.1", "-p", str(port), "-t", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=peer_env())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise ModelError(f"ggml-rpc-server on core {core} did not start")


def _request(base: str, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    body = {"prompt": prompt, "n_predict": max_tokens, "temperature": 0.0, "top_k": 1,
            "cache_prompt": False, "return_tokens": True}  # fmt: skip
    out = post_json(base + "/completion", body, timeout=900)
    t = out["timings"]
    return {
        "prompt_tokens": int(t["prompt_n"]),
        "ttft_s": round(t["prompt_ms"] / 1000, 4),
        "prefill_ms_per_token": round(t["prompt_per_token_ms"], 3),
        "decode_ms_per_token": round(t["predicted_per_token_ms"], 2),
        "tokens": [int(v) for v in out.get("tokens", [])],
    }


def _system(
    server: Path, gguf: str, extra: list[str], prompts: list[dict[str, Any]], max_tokens: int
) -> list[dict[str, Any]]:
    proc, base = launch_llama_server(server, gguf, extra, 1, prefix=["taskset", "-c", "0"])
    try:
        _request(base, prompts[0]["ids"][:64], 2)  # warm up
        return [{"prompt": p["id"], "source": p["source"], **_request(base, p["ids"], max_tokens)}
                for p in prompts]  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run_rpc_peer(
    model: str, prompts: list[dict[str, Any]], max_tokens: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """llama.cpp alone on core 0, then across two RPC devices (cores 0 and 1)."""
    binaries = rpc_binaries()
    if binaries is None:
        raise ModelError("llama.cpp's RPC peer is not built", hint="run the bench with --build-peers")
    server, rpc = binaries
    gguf = str(catalog.prepare(model))
    log("jupiter bench: llama.cpp alone")
    single = _system(server, gguf, [], prompts, max_tokens)
    devices = [_rpc_server(rpc, core) for core in (0, 1)]
    try:
        log("jupiter bench: llama.cpp RPC, two devices")
        extra = ["--rpc", ",".join(addr for _, addr in devices), "-ngl", "99"]
        pipeline = _system(server, gguf, extra, prompts, max_tokens)
    finally:
        for proc, _ in devices:
            proc.kill()
            proc.wait()
    return {"llama.cpp-single": single, "llama.cpp-rpc": pipeline}
