"""The collective engine: many requests, several drafters, one target (paper 001).

Requests wait in a pending pool and run, up to ``max_batch`` at a time, in a running
pool. Each round:

1. every drafter drafts ``s`` tokens for every running request (a model drafter in one
   batch per step; a drafter that calls no model has each draft cut to the length its
   kind of draft has earned);
2. per request, the drafts are merged by the weighted majority vote (``voting``);
3. the target verifies every request's voted draft in one batched forward
   (greedy: ``extend_many_choices``, one id per row off the device; sampled:
   ``extend_many``, with one uniform per position so that any choice of drafts gives
   the target's own text, ``verify.coupled_accept``);
4. every draft is scored against what the target produced, the drafters' weights are
   rewarded or punished and the drafters hear what was kept; ``s`` for the next round
   comes from the speculation length selector (or stays fixed).

A request leaves the running pool at its end-of-generation token, its token budget or
the context's end; a pending one takes its place, prefilled in one batch with the others
joining. ``s = 0`` is plain batched decoding. With ``pipeline=True`` drafting and
verifying run at the same time (``pipeline``).

With ``arrivals`` (a server's queue) requests also join while the engine runs: before
each round it takes the ones that ``joined`` (with their own keys and budgets; a seeded
one draws from the seed itself, whatever its key, so that it is the same text whenever
it comes) into the pending pool, and ends the ones that ``left`` (finish reason
``cancelled``); the run ends when no request is pending or running.

``stream`` yields a ``Response`` per request and step (its ``request`` is the prompt's
index, or an arrival's key); a request's last response carries the run's record so far in ``extras``;
``generate`` returns one ``Response`` per prompt, in order, each with the whole run's
record.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Generator, Iterator, Sequence

from coinfer.decoding.draft_length import AdaptiveDraftLength, DraftSizer
from coinfer.decoding.drafters import Drafter
from coinfer.decoding.engine import Arrivals
from coinfer.decoding.learned import Learned, learned_or_new
from coinfer.decoding.prompting import as_prompt, check_prompt
from coinfer.decoding.response import Responder, Response
from coinfer.decoding.speculative import target_costs
from coinfer.decoding.split import split_judge
from coinfer.engines.collective.config import CollectiveConfig
from coinfer.engines.collective.gate import SourceGate, gate_memory
from coinfer.engines.collective.pipeline import run_pipelined
from coinfer.engines.collective.rounds import Learner, Request, RunRecord, Session
from coinfer.engines.collective.selector import SpeculationLengthSelector
from coinfer.engines.collective.voting import VoteWeights
from coinfer.errors import ConfigError
from coinfer.models.base import SteerableModel

__all__ = ["Arrivals", "generate", "stream"]


def stream(
    target: SteerableModel,
    prompts: Sequence[str | Sequence[int]],
    *,
    drafts: Sequence[Drafter] = (),
    config: CollectiveConfig = CollectiveConfig(),  # noqa: B008 (frozen)
    arrivals: Arrivals | None = None,
    learned: Learned | None = None,
) -> Generator[Response, None, None]:
    """Responses as the requests advance (see the module). ``prompts``: token ids, or a
    user's messages (the model's chat template is applied). The drafters stay the
    caller's; each request is forgotten by them when it finishes. ``arrivals`` (not
    with ``pipeline``): requests that join and leave as it runs. ``learned``: where the
    target's costs, judges and gate memory are kept (a session's; None: this call's)."""
    if arrivals is not None and config.pipeline:
        raise ConfigError("requests join a running batch only without the pipeline", hint="drop pipeline")
    ids = [as_prompt(target, p) for p in prompts]
    if not drafts and config.draft_tokens != 0:
        raise ConfigError(
            "collective speculation needs at least one drafter",
            hint="pass drafts=[NgramDrafter(), …] or draft_tokens=0 (plain batched decoding)",
        )
    for prompt in ids:
        check_prompt(target, prompt)
    record, started = RunRecord(_unique_names(drafts)), time.perf_counter()
    learned = learned_or_new(learned)
    learner = _learner(target, drafts, config, learned)
    session = Session(target, drafts, config, learner, record, started, learned=learned)
    responders: dict[int, Responder] = {}
    if config.pipeline and drafts:
        steps = run_pipelined(session, ids)
    else:
        steps = _run_sequential(session, ids, arrivals)
    for touched in steps:
        for r in touched:
            response = _response(session, r, responders)
            if response is not None:
                yield response


def generate(
    target: SteerableModel,
    prompts: Sequence[str | Sequence[int]],
    *,
    drafts: Sequence[Drafter] = (),
    config: CollectiveConfig = CollectiveConfig(),  # noqa: B008 (frozen)
    learned: Learned | None = None,
) -> list[Response]:
    """Generate for every prompt: one ``Response`` per prompt, in order, with the whole
    text, every token and the run's record in ``extras``."""
    tokens: list[list[int]] = [[] for _ in prompts]
    last: dict[int, Response] = {}
    final: Response | None = None
    for final in stream(target, prompts, drafts=drafts, config=config, learned=learned):
        tokens[final.request] += final.tokens
        last[final.request] = final
    record = final.extras if final is not None else {}
    return [
        Response(
            target.detokenize(tokens[i]), tokens[i], last[i].stats, last[i].finish_reason, i, dict(record)
        )
        for i in range(len(prompts))
    ]


def _arrive(
    session: Session, arrivals: Arrivals | None, pending: deque[tuple[int, list[int]]], running: list[Request]
) -> list[Request]:
    """Take the requests that joined into ``pending`` and end those that left; the
    running ones ended (done now, released at the end of the round)."""
    if arrivals is None:
        return []
    for key, prompt, budget in arrivals.joined():
        check_prompt(session.target, prompt)
        pending.append((key, prompt))
        session.budgets[key] = budget
    gone = arrivals.left()
    if not gone:
        return []
    for item in [p for p in pending if p[0] in gone]:
        pending.remove(item)
        session.budgets.pop(item[0], None)
    ended = [r for r in running if r.key in gone and not r.done]
    for r in ended:
        r.finish_reason = "cancelled"
    return ended


def _unique_names(drafts: Sequence[Drafter]) -> list[str]:
    """The drafters' names, numbered where two share one."""
    names: list[str] = []
    for d in drafts:
        name, n = d.name, 2
        while name in names:
            name, n = f"{d.name}#{n}", n + 1
        names.append(name)
    return names


def _learner(
    target: SteerableModel, drafts: Sequence[Drafter], config: CollectiveConfig, learned: Learned
) -> Learner:
    n = len(drafts)
    weights = VoteWeights(max(1, n), config.vote)
    if config.draft_tokens == "auto":
        selector, fixed = SpeculationLengthSelector(config.selector), 0
    else:
        selector, fixed = None, int(config.draft_tokens)
    cut = [config.cut_cheap_drafts and d.model is None for d in drafts]
    # the verification cost curve, per forward over n tokens, that the learner splits
    # forwards by and cheap drafts' sizers cut them by: on every core a forward costs about
    # the same whether its tokens are one request's or a batch's, so the sequential engine,
    # and the pipeline's sequential rounds, share the speculative engine's curve for the
    # target; the pipeline's pipelined phases, on fewer cores, measure their own
    # (``pipeline.run_pipelined``)
    costs = target_costs(target, learned)
    floor = config.batch_floor
    sizers = [DraftSizer(AdaptiveDraftLength(costs=costs, batch_floor=floor)) if c else None for c in cut]
    # a cheap draft's sizer weighs what its drafts add to the whole forward (one request's,
    # or a batch's together), so it drafts as far as the sizer asks and sizes its own drafts
    own_lengths = config.draft_tokens != 0
    gate = None
    if config.gate is not None:
        with_model = [d.model is not None for d in drafts] or [False]
        names = _unique_names(drafts) or ["none"]
        own = cut if own_lengths else [False] * n
        gate = SourceGate(
            max(1, n),
            config.gate,
            with_model,
            own or [False],
            names=names,
            memory=gate_memory(target, learned),
        )
    return Learner(
        weights,
        selector,
        fixed,
        config.sampling,
        config.max_tokens,
        gate,
        drafts,
        sizers,
        own_lengths=own_lengths,
        costs=costs,
        judge=split_judge(target, pipeline=False, learned=learned),
    )


def _response(session: Session, r: Request, responders: dict[int, Responder]) -> Response | None:
    """The response for what ``r`` gained since its last one (None if nothing, unfinished);
    its rounds were counted into ``r.stats`` as the batch ran (``take``: an end token is
    never among ``r.tokens``)."""
    new = r.tokens[r.reported :]
    r.reported = len(r.tokens)
    if not new and not r.done:
        return None
    out = responders.setdefault(r.key, Responder(session.target.detokenize, stats=r.stats))
    if not r.done:
        return out.report(new, request=r.key)
    del responders[r.key]
    extras = session.record.as_extras(session.learner)
    return out.report(new, finish=r.finish_reason, request=r.key, extras=extras)


def _run_sequential(
    session: Session, prompts: Sequence[list[int]], arrivals: Arrivals | None = None
) -> Iterator[list[Request]]:
    """Draft, vote and verify in turn, every running request in each batch; yield the
    requests each step advanced."""
    target, learner = session.target, session.learner
    pending = deque(enumerate(prompts))
    running: list[Request] = []
    try:
        while True:
            ended = _arrive(session, arrivals, pending, running)
            if ended:
                yield ended
            if not (pending or running):
                return
            joining = session.admit(pending, running)
            if joining:
                running += joining
                yield joining
            live = [r for r in running if not r.done]
            if live:
                session.round(live)
                yield live
            for r in [r for r in running if r.done]:
                target.release(r.seq)
                learner.forget(r.key)
            running = [r for r in running if not r.done]
    finally:
        for r in running:
            target.release(r.seq)
