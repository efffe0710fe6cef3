"""The LLMCad engine (paper 002): a memory-resident draft writes a token tree, the target
verifies the whole tree in one pass when the draft's confidence runs low.

Each round: the draft grows a tree after the context (``TreeGrower``, paced by Eq. 1-2)
until the self-adaptive fallback fires (T_c < alpha, §3.3) or the tree is full; the
target runs once over the pending token and the tree (one batch, each token seeing only
its ancestors) and the walk of ``accept_tree`` keeps the target's own text: the longest
verified path and the target's next token. Both caches roll back to it. While the
target verifies, the draft goes on along its most confident branch (§3.4). Under a
memory budget the ``WeightPrefetcher`` reads the target's weights while the draft
computes and follows the target's forward layer by layer, and the draft reads the
prompt during the target's prefill. With no
memory budget, ``gate.ModeGate`` measures tree rounds against plain speculation with
prompt lookup (what ``--draft auto`` does) and keeps the faster: on a target that fits in
memory, drafting with a model need not pay.

Served with other requests at once (a target shared as ``SharedModel``), a round whose
last forward carried other requests' rows is priced as a step of that batch: prompt
lookup's draft is cut by what a forward of every request's tokens costs
(``DraftSizer.cut_together`` over the per-forward cost curve every request of the session
shares), so speculation gives way to plain batched steps when the batch is big enough
that it no longer pays, as the speculative engine's batched drafts do; a request alone
rounds as above.

Three layers, as every engine: ``generate_rounds`` yields a ``TreeRound`` per target
forward, ``stream`` turns them into ``Response`` objects, ``generate`` blocks.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from coinfer.decoding.batch_speculation import BATCH_FLOOR
from coinfer.decoding.draft_length import AdaptiveDraftLength, DraftSizer
from coinfer.decoding.drafters import check_same_vocabulary
from coinfer.decoding.learned import Learned, learned_or_new
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.prompting import as_prompt, check_prompt
from coinfer.decoding.response import Responder, Response, collect
from coinfer.decoding.sampling import PositionDraws, probs_from_logits, sample_at
from coinfer.decoding.speculative import take_round, target_costs, window_room
from coinfer.decoding.verify import accept_tree
from coinfer.engines.llmcad.config import LLMCadConfig
from coinfer.engines.llmcad.fallback import AdaptiveThreshold, VerifyCost
from coinfer.engines.llmcad.gate import ModeGate
from coinfer.engines.llmcad.speculation import Chain, Speculator
from coinfer.engines.llmcad.tree_draft import TreeGrower, forward_cost
from coinfer.errors import ConfigError
from coinfer.models.base import Seq, SteerableModel
from coinfer.models.prefetch import WeightPrefetcher, disk_bytes_read
from coinfer.models.shared import SharedModel
from coinfer.models.tree import TokenTree

__all__ = ["TreeRound", "generate", "generate_rounds", "stream"]

EXPLORING_TREE_SIZE = 4  # a tree round the gate runs only to measure it


@dataclass(frozen=True)
class TreeRound:
    """One target forward (the first is the prefill): the tokens it added, the tree it
    verified and why the draft stopped growing it (``fallback``: "confidence" when T_c fell
    below alpha, "tree_size", "ended" when no branch could grow, "fixed" for a fixed
    size), and the speculative tokens kept into the next tree or discarded."""

    tokens: list[int]
    drafted: int = 0
    accepted: int = 0
    branches: int = 0
    fallback: str | None = None
    alpha: float | None = None
    speculated_kept: int = 0
    speculated_discarded: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    prefetched: int = 0  # bytes of the target's weights read ahead this round
    mode: str = "tree"  # "tree" (the draft model's), "ngram" (prompt lookup alone) or "plain"
    finished: str | None = None


def _prefetcher(target: SteerableModel, budget: int) -> WeightPrefetcher:
    """The target's weight prefetcher (which needs the target's weights memory-mapped)."""
    if target.weights_file is None:
        raise ConfigError(
            f"a memory budget needs the target's weights memory-mapped; {target.name} holds them resident",
            hint="load the target with use_mmap=True (the CLI does so for --memory-budget)",
        )
    return WeightPrefetcher(target.weights_file, budget, model=target)


class _Request:
    """One request's state: the target's sequence, the draft's tree, the threshold."""

    def __init__(
        self, target: SteerableModel, draft: SteerableModel, config: LLMCadConfig, learned: Learned
    ) -> None:
        self.target, self.config = target, config
        self.draws = PositionDraws(config.sampling.seed)
        self.threshold = AdaptiveThreshold(config.alpha)
        self.costs = VerifyCost()
        self.prefetcher = None if config.memory_budget is None else _prefetcher(target, config.memory_budget)
        self.seq: Seq = target.new_sequence()
        self.grower: TreeGrower | None = None
        self.speculator: Speculator | None = None
        self.chain: Chain = []
        self.gate: ModeGate | None = None
        self.ngram = NgramDrafter()
        self.shared = target if isinstance(target, SharedModel) else None
        if self.shared is None:
            self.sizer = DraftSizer(AdaptiveDraftLength())
        else:  # a forward's cost is the batch's, whoever's rows: one curve for every request
            self.sizer = DraftSizer(
                AdaptiveDraftLength(costs=target_costs(target, learned), batch_floor=BATCH_FLOOR)
            )
        if config.draft_tokens != 0:
            self.grower = TreeGrower(
                draft,
                sampling=config.sampling,
                branch_confidence=config.branch_confidence,
                max_branches=config.max_branches,
            )
            if config.speculative:
                self.speculator = Speculator(draft, self.grower.confidence)
            if config.gate and config.draft_tokens == "auto" and config.memory_budget is None:
                self.gate = ModeGate()  # both models' forwards measured alike, once per model
                self.gate.observe_costs(
                    draft_forward_s=forward_cost(draft, learned),
                    target_forward_s=forward_cost(target, learned),
                )

    def close(self) -> None:
        self.ngram.close()
        if self.prefetcher is not None:
            self.prefetcher.close()
        if self.speculator is not None:
            self.speculator.close()
        if self.grower is not None:
            self.grower.close()
        self.target.release(self.seq)

    def loading(self, phase: str) -> None:
        """The target's weights: read ahead within the budget while the draft computes
        ("warm"), or as the target's forward gets on ("follow")."""
        if self.prefetcher is not None:
            getattr(self.prefetcher, phase)()

    def others(self) -> int:
        """Other requests' calls the target's last forward for this request carried (0:
        alone, or not served with others)."""
        batch = None if self.shared is None else self.shared.last_batch()
        return 0 if batch is None else batch.requests - 1

    def prefetched(self) -> int:
        return 0 if self.prefetcher is None else self.prefetcher.bytes_read

    def choose(self, logits: Any, position: int) -> int:
        """The target's token at ``position`` from its logits (greedy, or the position's draw)."""
        return sample_at(probs_from_logits(logits, self.config.sampling), self.draws.uniform(position))


def generate_rounds(
    target: SteerableModel,
    prompt: Sequence[int],
    *,
    draft: SteerableModel,
    config: LLMCadConfig = LLMCadConfig(),  # noqa: B008  (frozen, so a shared default is safe)
    learned: Learned | None = None,
) -> Iterator[TreeRound]:
    """Yield rounds until an end-of-generation token or ``max_tokens``; the text is the
    target's own (greedy: equal to the target alone; sampled: the same seeded text).
    ``learned``: where both models' forward costs are kept (a session's; None: this call's)."""
    check_prompt(target, prompt)
    check_same_vocabulary(draft, target)
    req = _Request(target, draft, config, learned_or_new(learned))
    try:
        t0 = time.perf_counter()
        first = _prefill(req, list(prompt))
        if req.prefetcher is not None:  # the buffers both models use are resident now
            req.prefetcher.check_room()
        context, produced = list(prompt), 0
        r = TreeRound([first], verify_s=time.perf_counter() - t0)
        while True:
            kept, finished = take_round(r.tokens, context, target, config.max_tokens - produced)
            produced += len(kept)
            yield replace(r, tokens=kept, finished=finished)
            if finished:
                return
            room = min(config.max_tokens - produced - 1, window_room(len(context), target.n_ctx))
            if req.grower is not None:
                room = min(room, window_room(len(context), req.grower.draft.n_ctx))
            r = _round(req, context, room)
    finally:
        req.close()


def _prefill(req: _Request, prompt: list[int]) -> int:
    """The target reads the prompt: its first token. Under a memory budget the draft reads
    the prompt meanwhile on another thread (the target waits on storage much of the time),
    so the first tree starts at once."""
    req.loading("follow")
    if req.prefetcher is None or req.grower is None:
        return _first_token(req, prompt)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmcad-draft-read") as pool:
        reading = pool.submit(req.grower.read, prompt)
        token = _first_token(req, prompt)
        reading.result()
    return token


def _first_token(req: _Request, prompt: list[int]) -> int:
    return req.choose(req.target.extend(req.seq, prompt, last_only=True)[-1], len(prompt))


def _round(req: _Request, context: list[int], room: int) -> TreeRound:
    """One round in the mode the gate picks (a tree round when there is no gate)."""
    if req.grower is None:
        t0 = time.perf_counter()
        _, nxt = _verify(req, context, None)
        return TreeRound([nxt], mode="plain", verify_s=time.perf_counter() - t0)
    if req.others():  # a step of a batch: trees give way, drafts are priced by the batch
        return _ngram_round(req, context, room)
    if req.gate is None:
        return _tree_round(req, context, room, _tree_limit(req.config))
    mode = req.gate.choose()
    t0 = time.perf_counter()
    if mode == "ngram":
        r = _ngram_round(req, context, room)
        req.gate.observe_costs(target_forward_s=r.verify_s)
    else:
        limit = _tree_limit(req.config)
        r = _tree_round(
            req, context, room, min(limit, EXPLORING_TREE_SIZE) if req.gate.exploring("tree") else limit
        )
    req.gate.observe(mode, len(r.tokens), time.perf_counter() - t0)
    return r


def _ngram_round(req: _Request, context: list[int], room: int) -> TreeRound:
    """Plain speculation with prompt lookup, as ``--draft auto`` does it: the draft length
    chosen from measured costs and acceptance, one chain verified."""
    req.chain = []
    sizer = req.sizer
    sizer.learn(0, context)
    k = max(0, min(sizer.next_k(), room))
    t0 = time.perf_counter()
    proposal = req.ngram.propose(context, k)
    draft_s = time.perf_counter() - t0
    if req.shared is None:
        d = sizer.cut(0, len(context), proposal)
    else:
        d = sizer.cut_together([(0, len(context), proposal)], others=req.others())[0]
    t1 = time.perf_counter()
    path, nxt = _verify(req, context, TokenTree.chain(d.tokens))
    new = [*d.tokens[: len(path)], nxt]
    req.ngram.feedback(0, context, new)
    verify_s = time.perf_counter() - t1
    # priced as the forward it ran in: every request's tokens, and what they cost together
    batch = None if req.shared is None else req.shared.last_batch()
    tokens, seconds = (len(d.tokens) + 1, verify_s) if batch is None else (batch.tokens, batch.seconds)
    sizer.observe(drafted=tokens - 1, draft_s=draft_s, verify_s=seconds, proposed=len(proposal.tokens))
    return TreeRound(
        new, drafted=len(d.tokens), accepted=len(path), draft_s=draft_s, verify_s=verify_s, mode="ngram"
    )


def _tree_round(req: _Request, context: list[int], room: int, limit: int) -> TreeRound:
    """Grow a tree until the fallback fires, verify it in one target pass (the draft
    speculating meanwhile), roll both sides back to what the target kept."""
    t0 = time.perf_counter()
    grower, alpha = req.grower, req.threshold.alpha
    assert grower is not None  # a tree round has a draft
    read_before = req.prefetched()
    req.loading("warm")
    grower.start(context, req.chain[: min(room, limit)])
    fallback = _grow_until_fallback(grower, req, room, limit)
    t1 = time.perf_counter()
    tree = grower.tree()
    spec = req.speculator
    if spec is not None:
        branch = max(grower.branches, key=lambda b: b.confidence)
        spec.begin(branch, min(room - len(branch.nodes), limit))
    req.loading("follow")
    try:
        path, nxt = _verify(req, context, tree)
    finally:
        speculated = spec.end() if spec is not None else []
    kept = _kept_speculation(req, path, nxt, speculated)
    req.chain = speculated[1:] if kept else []
    if len(tree):
        branches = len(grower.branches)
        n_all = grower.settle(path)
        if req.config.draft_tokens == "auto":
            req.threshold.update(len(path), n_all)
    verify_s = time.perf_counter() - t1
    req.costs.observe(len(tree), t1 - t0, verify_s)
    return TreeRound(
        [*(tree.tokens[n] for n in path), nxt],
        drafted=len(tree),
        accepted=len(path),
        branches=branches if len(tree) else 0,
        fallback=fallback,
        alpha=alpha if req.config.draft_tokens == "auto" else None,
        speculated_kept=len(speculated) if kept else 0,
        speculated_discarded=0 if kept else len(speculated),
        draft_s=t1 - t0,
        verify_s=verify_s,
        prefetched=req.prefetched() - read_before,
    )


def _grow_until_fallback(grower: TreeGrower, req: _Request, room: int, limit: int) -> str:
    """Lengthen the tree a token at a time until the fallback fires (or it holds ``limit``)."""
    auto = req.config.draft_tokens == "auto"
    while True:
        if len(grower.tokens) >= limit:
            return "tree_size" if auto else "fixed"
        if not grower.grow(room, limit):
            return "ended"
        if auto and req.threshold.due(
            grower.branch_confidences(), req.costs.floor(grower.expected, len(grower.tokens))
        ):
            return "confidence"


def _tree_limit(config: LLMCadConfig) -> int:
    """The most tokens a tree may hold: ``max_tree_size``, or the fixed size."""
    return config.max_tree_size if config.draft_tokens == "auto" else int(config.draft_tokens)


def _verify(req: _Request, context: list[int], tree: Any) -> tuple[list[int], int]:
    """One target forward over the pending token and the tree: (kept nodes, next token).
    Greedy, only each row's choice comes back, not its logits (``extend_greedy``)."""
    target, seq = req.target, req.seq
    greedy = req.config.sampling.greedy
    extend = target.extend_greedy if greedy else target.extend
    if tree is None:
        if greedy:
            return [], int(target.extend_greedy(seq, [context[-1]])[-1])
        return [], req.choose(target.extend(seq, [context[-1]], last_only=True)[-1], len(context))
    if tree.parents == tuple(range(-1, len(tree) - 1)):  # a chain: no tree mask needed
        rows = extend(seq, [context[-1], *tree.tokens])
        path, nxt = accept_tree(tree, rows, req.config.sampling, req.draws, len(context))
        target.truncate(seq, len(context) + len(path))
        return path, nxt
    ids, parents = tree.verify_inputs(context[-1])
    rows = extend(seq, ids, parents=parents)
    path, nxt = accept_tree(tree, rows, req.config.sampling, req.draws, len(context))
    target.commit_path(seq, [0, *(n + 1 for n in path)])
    return path, nxt


def _kept_speculation(req: _Request, path: list[int], nxt: int, speculated: Chain) -> bool:
    """Whether the draft's speculation continues the target's text: the target kept the
    whole branch it went on along, and chose the token it went on with."""
    spec = req.speculator
    if spec is None or spec.branch is None or not speculated:
        return False
    return path == spec.branch.nodes and speculated[0][0] == nxt


def stream(
    target: SteerableModel,
    prompt: str | Sequence[int],
    *,
    draft: SteerableModel,
    config: LLMCadConfig = LLMCadConfig(),  # noqa: B008
    learned: Learned | None = None,
) -> Generator[Response, None, None]:
    """One ``Response`` per target forward: the text it adds, the stats so far, and in
    ``extras`` the trees (sizes, fallbacks), alpha's history and the speculation.

    ``prompt``: token ids, or a user's message (the target's chat template is applied).
    ``draft``: the memory-resident model, of the target's vocabulary.
    """
    ids = as_prompt(target, prompt)
    out = Responder(target.detokenize, prompt_tokens=len(ids), eos_ids=target.eos_ids)
    log = _Log(draft.name, disk_bytes_read())
    for r in generate_rounds(target, ids, draft=draft, config=config, learned=learned):
        if out.stats.target_forwards:
            log.add(r)
        yield out.step(
            r.tokens, drafted=r.drafted, accepted=r.accepted, finish=r.finished, extras=log.extras()
        )


class _Log:
    """What ``stats.extras`` reports of a request's verifications."""

    def __init__(self, draft: str, disk_read_at_start: int | None) -> None:
        self.draft = draft
        self.disk_read_at_start = disk_read_at_start
        self.prefetched = 0
        self.tree_sizes: list[int] = []
        self.fallbacks: dict[str, int] = {}
        self.alpha_history: list[float] = []
        self.kept = self.discarded = 0
        self.draft_s = self.verify_s = 0.0
        self.modes: dict[str, int] = {}

    def add(self, r: TreeRound) -> None:
        self.tree_sizes.append(r.drafted)
        self.modes[r.mode] = self.modes.get(r.mode, 0) + 1
        if r.fallback:
            self.fallbacks[r.fallback] = self.fallbacks.get(r.fallback, 0) + 1
        if r.alpha is not None:
            self.alpha_history.append(r.alpha)
        self.kept += r.speculated_kept
        self.discarded += r.speculated_discarded
        self.draft_s += r.draft_s
        self.verify_s += r.verify_s
        self.prefetched += r.prefetched

    def extras(self) -> dict[str, Any]:
        return {
            "draft": self.draft,
            "verifications": len(self.tree_sizes),
            "tree_sizes": list(self.tree_sizes),
            "fallbacks": dict(self.fallbacks),
            "modes": dict(self.modes),
            "alpha_history": list(self.alpha_history),
            "speculative": {"kept": self.kept, "discarded": self.discarded},
            "draft_s": round(self.draft_s, 4),
            "verify_s": round(self.verify_s, 4),
            "bytes_read": _since(self.disk_read_at_start, disk_bytes_read()),
            "prefetched_bytes": self.prefetched,
        }


def _since(start: int | None, now: int | None) -> int | None:
    """Bytes read from storage by this process since ``start`` (None where unknown)."""
    return None if start is None or now is None else now - start


def generate(
    target: SteerableModel,
    prompt: str | Sequence[int],
    *,
    draft: SteerableModel,
    config: LLMCadConfig = LLMCadConfig(),  # noqa: B008
    learned: Learned | None = None,
) -> Response:
    """Generate to the end: one ``Response`` with the whole text and every token."""
    return collect(stream(target, prompt, draft=draft, config=config, learned=learned), target.detokenize)
