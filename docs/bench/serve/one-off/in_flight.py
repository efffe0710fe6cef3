"""The loop the one-off scripts share: a chat kept at CLIENTS requests in flight over a
suite's prompts (a new one as soon as one ends), each greedy or seeded by its index, 128
tokens, until every prompt is answered. Imported by the scripts beside it."""
import time
from collections import deque
from coinfer.decoding.sampling import SamplingParams


def run_in_flight(chat, suite, clients, *, speculate=True, temperature=0.0, on_step=None):
    """Every prompt of ``suite`` through ``chat`` with ``clients`` in flight; ``on_step``
    hears each step's seconds. Returns the jobs, the wall seconds and the steps."""
    model = chat.model
    todo, waiting, running, jobs = deque(range(len(suite))), deque(), [], []
    t0, steps = time.perf_counter(), 0
    while todo or waiting or running:
        while todo and len(waiting) + len(running) < clients:
            i = todo.popleft()
            prompt = model.chat_prompt(suite[i]["messages"])
            params = SamplingParams(temperature=temperature, seed=i)
            js = chat.new_jobs(i, prompt, n=1, max_tokens=128, params=params, speculate=speculate)
            jobs += js
            waiting.extend(js)
        s0 = time.perf_counter()
        running = chat.step(waiting, running)
        steps += 1
        if on_step is not None:
            on_step(time.perf_counter() - s0)
    return jobs, time.perf_counter() - t0, steps
