"""Jupiter on the engine convention: ``stream(cluster, prompt_ids, config=JupiterConfig())``
yields a ``Response`` per token; ``generate`` returns the whole request.

The prompt is read in the sequence plan's sub-sequences (Eq. 2-4) through the pipeline of
devices (intra-sequence pipelined prefill); ``pipelined_prefill=False`` reads it in one
piece, a plain pipeline. Decoding then passes one token at a time through the stages.
The last response's ``extras`` hold the plan and what each device did: its layers, bytes
sent to the next stage, seconds computed, peak memory.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import asdict, dataclass, field

from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.decoding.response import DecodeStats, Response, collect
from coinfer.decoding.sampling import SamplingParams
from coinfer.engines.jupiter.cluster import EdgeCluster
from coinfer.engines.jupiter.pipeline import Picker, Traffic, drive
from coinfer.errors import ConfigError, ContextOverflowError, TransportError

__all__ = ["JupiterConfig", "generate", "stream"]


@dataclass(frozen=True)
class JupiterConfig:
    """``pipelined_prefill``: the prompt in planned sub-sequences (paper 004 §IV-A), or in
    one piece; ``min_part``: Eq. 3's shortest sub-sequence (None: from the devices'
    profiles); ``max_parts``: at most this many (None: ``4 |D|``, the paper's);
    ``parts``: exactly this many (as many as ``min_part`` allows), cut by Eq. 2."""

    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    pipelined_prefill: bool = True
    min_part: int | None = None
    max_parts: int | None = None
    parts: int | None = None

    def __post_init__(self) -> None:
        if self.parts is not None and self.parts < 1:
            raise ConfigError(f"parts must be >= 1, got {self.parts}")
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.min_part is not None and self.min_part < 1:
            raise ConfigError(f"min_part must be >= 1, got {self.min_part}")
        if self.max_parts is not None and self.max_parts < 1:
            raise ConfigError(f"max_parts must be >= 1, got {self.max_parts}")


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


def stream(
    cluster: EdgeCluster, prompt_ids: Sequence[int], *, config: JupiterConfig | None = None
) -> Generator[Response, None, None]:
    """One request through the devices, a ``Response`` per token."""
    config = config or JupiterConfig()
    max_tokens = _budget(cluster, prompt_ids, config)
    parts = _parts(cluster, len(prompt_ids), config)
    stats = DecodeStats(prompt_tokens=len(prompt_ids))
    detok = IncrementalDetokenizer(cluster.text.detokenize)
    traffic = Traffic()
    cluster.begin(asdict(config.sampling))
    pick = Picker(config.sampling) if cluster.world == 1 else None
    tokens = drive(
        cluster.stage, cluster.world, list(prompt_ids), parts,
        max_tokens=max_tokens, eos=cluster.text.eos_ids, pick=pick, traffic=traffic,
    )  # fmt: skip
    produced = 0
    try:
        for token in tokens:
            if produced:
                stats.verified(0, 0)
            else:
                stats.prefilled()
            produced += 1
            stats.emitted(1)
            finish = (
                "stop" if token in cluster.text.eos_ids else ("length" if produced >= max_tokens else None)
            )
            text = detok.push(token)
            if finish is None:
                yield Response(text, [token], stats.snapshot())
                continue
            tokens.close()
            extras = {"parts": list(parts), "split": cluster.split, "devices": cluster.finish(traffic)}
            yield Response(text + detok.flush(), [token], stats.snapshot(), finish, extras=extras)
            return
    except GeneratorExit:  # the caller stopped early: STOP goes out, the reports come back
        tokens.close()
        cluster.finish(traffic)
        raise
    except RuntimeError as exc:  # gloo: a device's connection broke
        raise TransportError(
            f"a device stopped answering: {str(exc).splitlines()[0][:200]}",
            hint="check that every device is still running",
        ) from exc


def generate(
    cluster: EdgeCluster, prompt_ids: Sequence[int], *, config: JupiterConfig | None = None
) -> Response:
    """The whole request as one ``Response``."""
    return collect(stream(cluster, prompt_ids, config=config), cluster.text.detokenize)
