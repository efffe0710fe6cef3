"""What the in-process one-offs share: qwen2.5-coder-1.5b loaded for chat as coinfer serve
loads it (8 slots), warmed by one short chat, build_suite(per) and the served speculative
engine's batch speculator (n-gram drafter, floor 0, the gate) installed on the chat."""
from coinfer.bench.workloads import build_suite
from coinfer.chat.base import ChatRequest
from coinfer.chat.local import open_local_chat
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.learned import Learned
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.speculative import target_costs


def open_served_batch(per):
    """(chat, model, suite, speculator)."""
    chat = open_local_chat("qwen2.5-coder-1.5b", n_ctx=4096)
    chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
    spec = BatchSpeculator.over(NgramDrafter(), target_costs(chat.model, Learned()), batch_floor=0.0)
    chat.speculator = spec
    return chat, chat.model, build_suite(per_category=per), spec


def watch_verified(spec, proposals, record):
    """Keeps each request's latest proposal in ``proposals`` (key -> (context length, Draft),
    before the cut) and calls ``record(key, draft, kept)`` for every draft a step verified."""
    propose_many, accepted = spec.drafter.propose_many, spec.accepted

    def propose(contexts, k):
        drafts = propose_many(contexts, k)
        for (key, context), d in zip(contexts, drafts):
            proposals[key] = (len(context), d)
        return drafts

    def accept(key, context, draft, choices):
        kept = accepted(key, context, draft, choices)
        if draft:
            record(key, draft, len(kept) - 1)
        return kept

    spec.drafter.propose_many, spec.accepted = propose, accept


def run_prompts(chat, suite, lo, hi, speculate=True, max_tokens=128):
    """Prompts lo..hi-1 of ``suite`` all at once through ``chat``, greedy, to the end, as the
    server batches them: (the jobs, the wall seconds). Shared by ab_policy.py, cold_cut.py and
    park_ab.py (moved here after they ran; what they do is unchanged)."""
    import time
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams

    jobs = []
    for i in range(lo, hi):
        prompt = chat.model.chat_prompt(suite[i]["messages"])
        jobs += chat.new_jobs(i, prompt, n=1, max_tokens=max_tokens, params=SamplingParams(temperature=0.0),
                              speculate=speculate)
    waiting, running = deque(jobs), []
    t0 = time.perf_counter()
    while waiting or running:
        running = chat.step(waiting, running)
    return jobs, time.perf_counter() - t0
