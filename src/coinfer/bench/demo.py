"""``coinfer demo``: every engine once on the embedded default models, each beside its
baseline, as a user would run them (the ``coinfer`` command in real processes: the
loopback remote server of Minions, DRAGON's cloud process, Jupiter's worker processes),
with one row per engine and a trace of each for ``coinfer view``.

Rows (``Row``): the engine, what it did, its baseline and the ratio of one measure
against it, measured side by side in this run:

* speculative, collective, llmcad: decode tokens/s against plain decoding of the same
  target on the same prompt;
* minions: the remote's tokens (what a cloud bills) against the remote reading the
  document itself;
* dragon: end-to-end tokens/s (the cloud's reading included) against the device answering
  alone from its own documents (the answer it can give is the point: it sees both sides'
  documents); device and cloud on one thread and a core each, as on two machines;
* jupiter: end-to-end tokens/s of a pipeline of two devices with outline decoding
  against one device decoding plainly.

A run that fails gives its row the error's last line; the others still run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from coinfer.bench.dragon import RagCloud, rag_ask, side_cores
from coinfer.errors import CoinferError, ConfigError

__all__ = ["DemoConfig", "Row", "demo_table", "run_demo"]

DATA = Path(__file__).with_name("data")
CODE_PROMPT = (
    "Add type hints and a docstring to this function, and return the whole function:\n\n"
    "def merge(a, b):\n    out = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
    "        if a[i] <= b[j]:\n            out.append(a[i])\n            i += 1\n        else:\n"
    "            out.append(b[j])\n            j += 1\n    out.extend(a[i:])\n    out.extend(b[j:])\n"
    "    return out\n"
)
LIST_PROMPT = "What are some tips for improving sleep quality?"  # a list question: outline decoding
MINIONS_QUESTION = "What is the default comment character of a shlex lexer (its commenters attribute)?"
MINIONS_DOC_CHARS = 6000  # the start of shlex.py: the answer is there, and a 2-core run stays short


@dataclass(frozen=True)
class DemoConfig:
    """``out``: the traces, the document and corpora written for the run, results.json.
    ``quick``: a short answer per engine and the smallest pairs (about a minute or two)."""

    out: Path
    quick: bool = False
    target: str = "qwen2.5-coder-1.5b"
    draft: str = "qwen2.5-coder-0.5b"
    timeout_s: float = 600.0

    @property
    def max_tokens(self) -> int:
        return 32 if self.quick else 128

    @property
    def small(self) -> str:
        """The model of the engines whose both sides run here (DRAGON, Jupiter, the local side)."""
        return self.draft


@dataclass
class Row:
    engine: str
    did: str
    baseline: str
    measure: str
    ratio: float | None
    trace: str | None = None
    error: str | None = None
    runs: dict[str, Any] = field(default_factory=dict)


def run_demo(config: DemoConfig, on_row: Callable[[Row], None] | None = None) -> list[Row]:
    """Every engine's row, in order; ``on_row`` sees each as it is done. Writes
    ``results.json`` to ``config.out``."""
    config.out.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    for make in (speculative_rows, minions_row, dragon_row, jupiter_row):
        made = make(config)
        for row in made if isinstance(made, list) else [made]:
            rows.append(row)
            if on_row is not None:
                on_row(row)
    results = {"config": {"quick": config.quick, "target": config.target, "draft": config.draft},
               "rows": [asdict(r) for r in rows]}  # fmt: skip
    (config.out / "results.json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return rows


# ---- the engines --------------------------------------------------------------------------
def speculative_rows(config: DemoConfig) -> list[Row]:
    """Plain decoding once, then the three engines of one target on the same prompt."""
    common = ["generate", CODE_PROMPT, "-m", config.target, "-n", str(config.max_tokens), "--json"]
    try:
        plain = _coinfer([*common, "--draft", "none"], config)
    except CoinferError as exc:
        return [_failed(e, f"plain {config.target}", exc) for e in ("speculative", "collective", "llmcad")]
    engines = {
        "speculative": ["--draft", "auto"],
        "collective": ["--engine", "collective", "--drafts", f"{config.draft},ngram"],
        "llmcad": ["--engine", "llmcad", "--draft", config.draft],
    }
    rows = []
    for engine, flags in engines.items():
        trace = config.out / f"{engine}.json"
        baseline = f"plain {config.target}"
        try:
            out = _coinfer([*common, *flags, "--trace", str(trace)], config)
        except CoinferError as exc:
            rows.append(_failed(engine, baseline, exc))
            continue
        rows.append(
            Row(engine, _did_generate(out), baseline, "decode tok/s",
                _ratio(out["stats"]["decode_tokens_per_s"], plain["stats"]["decode_tokens_per_s"]),
                str(trace), runs={"engine": out["stats"], "baseline": plain["stats"]})
        )  # fmt: skip
    return rows


def _did_generate(out: dict[str, Any]) -> str:
    s = out["stats"]
    return f"{s['accepted']}/{s['drafted']} drafts kept, {s['mean_accepted_length']:.2f} tokens per round"


def minions_row(config: DemoConfig) -> Row:
    """MinionS (local reads, remote plans) against the remote reading the document."""
    doc = config.out / "shlex-start.txt"
    doc.write_text((DATA / "minions/docs/shlex.py.txt").read_text(encoding="utf-8")[:MINIONS_DOC_CHARS])
    common = ["minions", "--doc", str(doc), "-q", MINIONS_QUESTION, "--remote", config.target,
              "--local", config.small, "--price-as", "gpt-4o", "--local-ctx", "4096", "--remote-ctx", "8192",
              "--json"]  # fmt: skip
    trace = config.out / "minions.json"
    baseline = f"remote-only {config.target}"
    try:
        alone = _coinfer([*common, "--protocol", "remote-only"], config)
        out = _coinfer([*common, "--max-rounds", "1", "--trace", str(trace)], config)
    except CoinferError as exc:
        return _failed("minions", baseline, exc)

    def remote(o: dict[str, Any]) -> int:
        u = o["usage"]["remote"]
        return int(u["prompt_tokens"] + u["completion_tokens"])

    did = f"answered {out['answer'][:40]!r}; remote read {remote(out)} tokens (${out['cost_usd']:.5f})"
    # the ratio is of remote tokens: below 1 is cheaper
    return Row("minions", did, baseline, "remote tokens", _ratio(remote(out), remote(alone)), str(trace),
               runs={"engine": out, "baseline": alone})  # fmt: skip


def dragon_row(config: DemoConfig) -> Row:
    """DRAGON with a cloud process on loopback, against the device alone."""
    qa = json.loads((DATA / "dragon/qa.jsonl").read_text(encoding="utf-8").splitlines()[0])
    device, cloud = (
        _corpus(config.out / "device-docs", qa["device"]),
        _corpus(config.out / "cloud-docs", qa["cloud"]),
    )
    device_core, cloud_core = side_cores()
    trace = config.out / "dragon.json"
    baseline = f"device-only {config.small}"

    def ask(link: list[str]) -> dict[str, Any]:  # the DRAGON bench's: on one thread, on the device's core
        try:
            out = rag_ask(config.small, device, qa["question"], config.max_tokens, device_core, link,
                          timeout_s=config.timeout_s)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise CoinferError(f"coinfer rag ran past {config.timeout_s:.0f} s") from exc
        if "error" in out:
            raise CoinferError(f"coinfer rag failed: {out['error']}")
        return out

    try:
        alone = ask([])
        cloud_side = RagCloud(cloud, config.small, cloud_core)
        try:
            out = ask(["--cloud", f"{cloud_side.host}:{cloud_side.port}", "--trace", str(trace)])
        finally:
            cloud_side.close()
    except CoinferError as exc:
        return _failed("dragon", baseline, exc)
    kept = ", ".join(f"{side} {out['accepted'][side]}/{out['accepted'][side] + out['rejected'][side]}"
                     for side in ("device", "cloud")) if "accepted" in out else "no aggregation"  # fmt: skip
    did = f"{out['mode']}: {out.get('cloud_documents', 0)} cloud documents; drafts kept {kept}"
    return Row("dragon", did, baseline, "tok/s",
               _ratio(out["tokens_per_s"], alone["tokens_per_s"]), str(trace),
               runs={"engine": out, "baseline": alone})  # fmt: skip


def jupiter_row(config: DemoConfig) -> Row:
    """Two devices (processes) with outline decoding, against one device decoding plainly."""
    common = ["edge", "launch", LIST_PROMPT, "-m", config.small, "-n", str(config.max_tokens * 2), "--json"]
    trace = config.out / "jupiter.json"
    baseline = f"1 device, plain {config.small}"
    try:
        alone = _coinfer([*common, "--devices", "1", "--decode", "naive"], config)
        out = _coinfer([*common, "--devices", "2", "--decode", "auto", "--trace", str(trace)], config)
    except CoinferError as exc:
        return _failed("jupiter", baseline, exc)
    points = out["extras"].get("outline") or []
    how = f"outline of {len(points)} points" if out["extras"].get("decoded") == "outline" else "sequential"
    layers = ", ".join(f"{d['layers'][0]}-{d['layers'][1]}" for d in out["extras"]["devices"])
    did = f"2 devices (layers {layers}), {how}"
    return Row("jupiter", did, baseline, "tok/s",
               _ratio(out["stats"]["tokens_per_s"], alone["stats"]["tokens_per_s"]), str(trace),
               runs={"engine": out["stats"], "baseline": alone["stats"]})  # fmt: skip


# ---- running the command ------------------------------------------------------------------
def _coinfer(args: list[str], config: DemoConfig) -> dict[str, Any]:
    """One ``coinfer`` command's ``--json`` output; a failure as ``CoinferError``."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "coinfer", *args], capture_output=True, text=True,
            timeout=config.timeout_s,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise CoinferError(f"coinfer {args[0]} ran past {config.timeout_s:.0f} s") from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-2:]
        raise CoinferError(f"coinfer {args[0]} failed: {' '.join(last)}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _corpus(folder: Path, files: dict[str, str]) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return str(folder)


def _ratio(mine: float, theirs: float) -> float | None:
    return round(mine / theirs, 3) if theirs else None


def _failed(engine: str, baseline: str, exc: CoinferError) -> Row:
    return Row(engine, "", baseline, "", None, error=str(exc))


def demo_table(rows: list[Row]) -> str:
    """One line per engine: what it did, and the ratio against its baseline."""
    lines = [f"{'engine':<12}{'against':<36}{'ratio':>8}  {'measure':<14}what it did"]
    for r in rows:
        if r.error is not None:
            lines.append(f"{r.engine:<12}{r.baseline:<36}{'failed':>8}  {'':<14}{r.error}")
            continue
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        lines.append(f"{r.engine:<12}{r.baseline:<36}{ratio:>8}  {r.measure:<14}{r.did}")
    return "\n".join(lines)


def elapsed(start: float) -> str:
    return f"{time.perf_counter() - start:.0f} s"


def check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} is a file", hint="pass --out a folder")
