"""Jupiter on the engine convention: ``stream(cluster, prompt_ids, config=JupiterConfig())``
yields a ``Response`` per token; ``generate`` returns the whole request.

The prompt is read in the sequence plan's sub-sequences (Eq. 2-4) through the pipeline of
devices (intra-sequence pipelined prefill); ``pipelined_prefill=False`` reads it in one
piece, a plain pipeline. Decoding then passes one token at a time through the stages.
The last response's ``extras`` hold the plan and what each device did: its layers, bytes
sent to the next stage, seconds computed, peak memory. In outline decoding a point's
text comes as one response whose ``extras["point"]`` is its index in the outline.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.decoding.engine import Arrivals
from coinfer.decoding.response import DecodeStats, Responder, Response, collect
from coinfer.decoding.sampling import SamplingParams
from coinfer.decoding.self_draft import widened_choices
from coinfer.decoding.tree_sizer import TreeSizer
from coinfer.engines.jupiter.branch_driver import BranchDriver, BranchRound
from coinfer.engines.jupiter.branches import BranchVerifier
from coinfer.engines.jupiter.cluster import EdgeCluster
from coinfer.engines.jupiter.interleave import drive_interleaved
from coinfer.engines.jupiter.outline import Route, point_text, route
from coinfer.engines.jupiter.outline_decode import OutlinePlan, decode_outline, outline_prompt
from coinfer.engines.jupiter.pipeline import MAX_SLOTS, Picker, Traffic, drive
from coinfer.engines.jupiter.tree_pipeline import TreeRound, TreeVerifier, drive_tree
from coinfer.errors import ConfigError, ContextOverflowError, TransportError

__all__ = ["DECODES", "JupiterConfig", "generate", "stream", "stream_batch"]

DECODES = ("naive", "sd", "outline", "auto")


@dataclass(frozen=True, kw_only=True)
class JupiterConfig:
    """``pipelined_prefill``: the prompt in planned sub-sequences (paper 004 §IV-A), or in
    one piece; ``min_part``: Eq. 3's shortest sub-sequence (None: from the devices'
    profiles); ``max_parts``: at most this many (None: ``4 |D|``, the paper's);
    ``parts``: exactly this many (as many as ``min_part`` allows), cut by Eq. 2;
    ``decode``: ``naive`` (one token per pass), ``sd`` (the cluster's self-drafting
    heads propose a tree, §V-A; ``tree_width``: head 1's guesses it branches on;
    ``adaptive_tree``: each round verifies the part of the tree that pays,
    ``decoding.tree_sizer``, down to none where the heads guess poorly),
    ``outline`` (an outline, then its points decoded together, §V-B) or ``auto`` (the
    router chooses the outline or sequential decoding per question); ``draft_heads``:
    outline and auto decoding speculate with the cluster's heads when it has them;
    ``max_batch``: how many requests a server puts in the pipeline at once in plain
    decoding (``stream_batch``, on dynamic caches)."""

    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    pipelined_prefill: bool = True
    min_part: int | None = None
    max_parts: int | None = None
    parts: int | None = None
    decode: str = "naive"
    tree_width: int = 1
    adaptive_tree: bool = True
    draft_heads: bool = True
    max_batch: int = 1

    def __post_init__(self) -> None:
        if self.decode not in DECODES:
            raise ConfigError(f"unknown decoding {self.decode!r}", hint=f"choose one of {', '.join(DECODES)}")
        if not 1 <= self.tree_width <= 8:
            raise ConfigError(f"tree_width must be 1..8, got {self.tree_width}")
        if self.parts is not None and self.parts < 1:
            raise ConfigError(f"parts must be >= 1, got {self.parts}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.min_part is not None and self.min_part < 1:
            raise ConfigError(f"min_part must be >= 1, got {self.min_part}")
        if self.max_parts is not None and self.max_parts < 1:
            raise ConfigError(f"max_parts must be >= 1, got {self.max_parts}")
        if not 1 <= self.max_batch <= MAX_SLOTS:
            raise ConfigError(f"max_batch must be 1..{MAX_SLOTS}, got {self.max_batch}")


def _parts(cluster: EdgeCluster, length: int, config: JupiterConfig) -> tuple[int, ...]:
    if not config.pipelined_prefill or cluster.world == 1:
        return (length,)
    plan = cluster.sequence_plan(
        length, min_part=config.min_part, max_parts=config.max_parts, exactly=config.parts
    )
    return plan.parts


def _budget(cluster: EdgeCluster, prompt: Sequence[int], config: JupiterConfig) -> int:
    if not prompt:
        raise ConfigError("the prompt is empty", hint="pass at least one token")
    room = cluster.n_ctx - len(prompt)
    if room < 1:
        raise ContextOverflowError(
            f"a prompt of {len(prompt)} tokens fills the context of {cluster.n_ctx}",
            hint="shorten the prompt or raise --ctx",
        )
    return min(config.max_tokens, room)


def _rounds(
    cluster: EdgeCluster, prompt_ids: Sequence[int], parts: Sequence[int], max_tokens: int,
    config: JupiterConfig, traffic: Traffic, sizer: TreeSizer | None,
) -> Generator[TreeRound, None, None]:  # fmt: skip
    """The request's verification rounds: one token each in plain decoding."""
    prompt, eos = list(prompt_ids), cluster.text.eos_ids
    if config.decode == "naive":
        pick = Picker(config.sampling) if cluster.world == 1 else None
        tokens = drive(cluster.stage, cluster.world, prompt, parts, max_tokens=max_tokens, eos=eos, pick=pick,
                       traffic=traffic)  # fmt: skip
        try:
            for token in tokens:
                yield TreeRound([token], 0, 0)
        finally:
            tokens.close()
        return
    heads = cluster.heads
    if heads is None:
        raise ConfigError(
            "speculative decoding needs draft heads", hint="give --heads DIR (coinfer edge train-heads)"
        )
    width = config.tree_width
    verifier = TreeVerifier(config.sampling, heads, width) if cluster.world == 1 else None
    rounds = drive_tree(
        cluster.stage, cluster.world, prompt, parts, max_tokens=max_tokens, eos=eos,
        choices=widened_choices(heads.k, width), heads=heads.k, width=width, verifier=verifier,
        traffic=traffic, sizer=sizer,
    )  # fmt: skip
    try:
        yield from rounds
    finally:
        rounds.close()


def stream(
    cluster: EdgeCluster, prompt: str | Sequence[int], *, config: JupiterConfig | None = None,
    system: str | None = None,
) -> Generator[Response, None, None]:  # fmt: skip
    """One request through the devices, a ``Response`` per verification round (per token
    in plain decoding; per point, in the outline's order, in outline decoding).
    ``prompt``: the question (put in the model's chat template after ``system``) or its
    ids; outline and auto decoding need the text."""
    config = config or JupiterConfig()
    if config.decode in ("outline", "auto"):
        if not isinstance(prompt, str):
            raise ConfigError(
                f"--decode {config.decode} reads the question: pass the prompt as text",
                hint="or use --decode sd or naive",
            )
        decision = route(prompt) if config.decode == "auto" else Route(True, "outline decoding was asked for")
        if decision.outline:
            yield from _outline_stream(cluster, prompt, config, system, decision)
            return
        sequential = "sd" if cluster.heads is not None and config.draft_heads else "naive"
        config = replace(config, decode=sequential)
        extra = {"router": decision.as_dict()}
    else:
        extra = {}
    ids = cluster.text.user_prompt(prompt, system=system) if isinstance(prompt, str) else list(prompt)
    yield from _sequential_stream(cluster, ids, config, extra)


def _sequential_stream(
    cluster: EdgeCluster, prompt_ids: Sequence[int], config: JupiterConfig, extra: dict[str, Any]
) -> Generator[Response, None, None]:
    max_tokens = _budget(cluster, prompt_ids, config)
    parts = _parts(cluster, len(prompt_ids), config)
    eos = cluster.text.eos_ids
    out = Responder(cluster.text.detokenize, prompt_tokens=len(prompt_ids), eos_ids=eos)
    traffic = Traffic()
    cluster.begin(asdict(config.sampling), tree_width=config.tree_width if config.decode == "sd" else 0)
    sizer = _sizer(cluster, config)
    rounds = _rounds(cluster, prompt_ids, parts, max_tokens, config, traffic, sizer)
    produced = 0
    try:
        for r in rounds:
            produced += len(r.tokens)
            finish = "stop" if r.tokens[-1] in eos else ("length" if produced >= max_tokens else None)
            if finish is None:
                yield out.step(r.tokens, drafted=r.drafted, accepted=r.accepted)
                continue
            rounds.close()
            extras = {"parts": list(parts), "split": cluster.split, "decode": config.decode, **extra,
                      "devices": cluster.finish(traffic)}  # fmt: skip
            if sizer is not None:
                extras["tree"] = sizer.summary()
            yield out.step(r.tokens, drafted=r.drafted, accepted=r.accepted, finish=finish, extras=extras)
            return
    except GeneratorExit:  # the caller stopped early: STOP goes out, the reports come back
        rounds.close()
        cluster.finish(traffic)
        raise
    except RuntimeError as exc:  # gloo: a device's connection broke
        raise _lost_device(exc) from exc


def stream_batch(cluster: EdgeCluster, arrivals: Arrivals, config: JupiterConfig) -> Iterator[Response]:
    """Plain decoding of the requests that join ``arrivals``, up to ``config.max_batch`` in
    the pipeline at once (``interleave``), all sampling as ``config.sampling`` says; a
    ``Response`` per token, its ``request`` the key the request joined with."""
    if config.decode != "naive" or cluster.kv != "dynamic":
        raise ConfigError(
            "several requests go through the pipeline at once in plain decoding on dynamic caches",
            hint="serve with --decode naive --kv dynamic, or --max-batch 1",
        )
    eos = cluster.text.eos_ids
    traffic, out = Traffic(), dict[int, Responder]()
    cluster.begin(asdict(config.sampling))
    pick = Picker(config.sampling) if cluster.world == 1 else None
    steps = drive_interleaved(
        cluster.stage, cluster.world, arrivals, slots=config.max_batch, eos=eos, pick=pick, traffic=traffic,
        parts_of=lambda n: _parts(cluster, n, config),
    )  # fmt: skip
    try:
        for step in steps:
            if step.key not in out:
                out[step.key] = Responder(
                    cluster.text.detokenize, prompt_tokens=step.prompt_tokens, eos_ids=eos
                )
            extras = {} if step.finish is None else _batch_extras(cluster, config, step.prompt_tokens)
            tokens = [] if step.token is None else [step.token]
            response = out[step.key].step(tokens, finish=step.finish, extras=extras)
            response.request = step.key
            if step.finish is not None:
                del out[step.key]
            yield response
    except GeneratorExit:  # the server stops: STOP goes out once the steps on their way are in
        steps.close()
        cluster.finish(traffic)
        raise
    except RuntimeError as exc:  # gloo: a device's connection broke; nothing more comes back
        raise _lost_device(exc) from exc
    cluster.finish(traffic)


def _batch_extras(cluster: EdgeCluster, config: JupiterConfig, prompt_tokens: int) -> dict[str, Any]:
    """A request's last response's extras in a run of several: its prompt's parts, the
    devices' layers (their traffic is the whole run's, reported when it ends)."""
    return {
        "parts": list(_parts(cluster, prompt_tokens, config)), "split": cluster.split, "decode": "naive",
        "in_pipeline": config.max_batch, "devices": cluster.layout(),
    }  # fmt: skip


def _sizer(cluster: EdgeCluster, config: JupiterConfig) -> TreeSizer | None:
    """The tree's sizer for speculative decoding with ``adaptive_tree``."""
    if config.decode != "sd" or not config.adaptive_tree or cluster.heads is None:
        return None
    return TreeSizer(widened_choices(cluster.heads.k, config.tree_width))


def _outline_driver(cluster: EdgeCluster, config: JupiterConfig, traffic: Traffic) -> BranchDriver:
    """Rank 0's driver of the branches, with the heads' trees when speculating."""
    heads = cluster.heads if config.draft_heads else None
    width = config.tree_width if heads is not None else 0
    cluster.begin(asdict(config.sampling), tree_width=width, branches=True)
    verifier = BranchVerifier(config.sampling, heads, max(width, 1)) if cluster.world == 1 else None
    choices = widened_choices(heads.k, width) if heads else ()
    return BranchDriver(
        cluster.stage, cluster.world, traffic, eos=cluster.text.eos_ids, heads=heads.k if heads else 0,
        width=max(width, 1), choices=choices, verifier=verifier,
        sizer=TreeSizer(choices) if heads and config.adaptive_tree else None,
    )  # fmt: skip


def _outline_stream(
    cluster: EdgeCluster, question: str, config: JupiterConfig, system: str | None, decision: Route
) -> Generator[Response, None, None]:
    """Outline decoding (§V-B): the points' texts in the outline's order; the sequential
    answer's tokens as they come when the outline was not one. ``n_tokens`` counts what
    is output (a point's text, tokenized); ``extras["decoded_tokens"]`` what the devices
    decoded to write it."""
    prompt = outline_prompt(cluster.text, question, system)
    max_tokens = _budget(cluster, prompt, config)
    parts = _parts(cluster, len(prompt), config)
    stats, traffic = DecodeStats(prompt_tokens=len(prompt)), Traffic()
    driver = _outline_driver(cluster, config, traffic)
    plan = OutlinePlan(max_tokens, groups=cluster.world, system=system)
    events = decode_outline(driver, cluster.world, cluster.text, question, prompt, parts, plan)
    detok = IncrementalDetokenizer(cluster.text.detokenize)
    extras: dict[str, Any] = {"router": decision.as_dict(), "decode": config.decode, "parts": list(parts),
                              "split": cluster.split, "groups": plan.groups}  # fmt: skip
    points: list[str] = []
    finish, eos, decoded = "stop", cluster.text.eos_ids, 0
    try:
        for event in events:
            tokens = [] if event.round is None else [t for t in event.round.tokens if t not in eos]
            if event.round is not None:  # an end-of-turn token ends, never output
                decoded += len(tokens)  # the outline's and the points' tokens count as output once written
                _count(stats, event.round, len(tokens) if event.sequential else 0)
                finish = "length" if event.round.finish == "length" else finish
            if event.points is not None:
                points = event.points
                extras.update({"outline": points, **event.extras})
                extras["decoded"] = "sequential" if event.sequential else "outline"
            if event.sequential and event.round is not None:
                yield Response("".join(detok.push(t) for t in tokens), tokens, stats.snapshot())
            elif event.point is not None:
                i = event.point
                chunk = ("\n" if i else "") + point_text(i + 1, points[i], event.text)
                written = cluster.text.tokenize(chunk)
                stats.emitted(len(written))
                yield Response(chunk, written, stats.snapshot(), extras={"point": i})
    except GeneratorExit:  # the caller stopped early: STOP goes out, the reports come back
        events.close()
        driver.close()
        cluster.finish(traffic)
        raise
    except RuntimeError as exc:  # gloo: a device's connection broke
        raise _lost_device(exc) from exc
    driver.close()
    extras["devices"] = cluster.finish(traffic)
    extras["decoded_tokens"] = decoded  # what the pipeline decoded, the outline included
    if driver.sizer is not None:
        extras["tree"] = driver.sizer.summary()
    yield Response(detok.flush(), [], stats.snapshot(), finish, extras=extras)


def _count(stats: DecodeStats, r: TreeRound | BranchRound, emitted: int) -> None:
    """One round into the stats: the first is the prompt's read, the others verifications;
    ``emitted``: the tokens it output (an end-of-turn token is not)."""
    if stats.target_forwards:
        stats.verified(r.drafted, r.accepted)
    else:
        stats.prefilled()
    stats.emitted(emitted)


def _lost_device(exc: RuntimeError) -> TransportError:
    return TransportError(
        f"a device stopped answering: {str(exc).splitlines()[0][:200]}",
        hint="check that every device is still running",
    )


def generate(
    cluster: EdgeCluster, prompt: str | Sequence[int], *, config: JupiterConfig | None = None,
    system: str | None = None,
) -> Response:  # fmt: skip
    """The whole request as one ``Response``."""
    return collect(stream(cluster, prompt, config=config, system=system), cluster.text.detokenize)
