"""Do prompts resumed from their cached prefixes (16-row tails) read as they do alone when
several are fed in one step, on a K-quant model? ``python tails_side_by_side.py MODEL``:
the unseen prompts' first four, each read whole alone (the reference), then resumed with a
tail of ``min_tail`` rows: alone, two at once, four at once, and beside other sequences'
single tokens (``MIN_TAIL=8``: the tail before fb7827b). Prints which last logits are bit-identical to the whole read."""

import json
import os
import sys

import numpy as np

from coinfer.chat.local import _cut
from coinfer.models import load_model

model = load_model(sys.argv[1], n_ctx=2048, n_seq_max=12, kv_unified=False)
model.min_tail = int(os.environ.get("MIN_TAIL", model.min_tail))  # 8: the rule before fb7827b
lines = open("docs/bench/serve/prompts/unseen.jsonl").readlines()[:4]
prompts = [model.chat_prompt(json.loads(line)["messages"]) for line in lines]
whole, expected = [], []
for p in prompts:
    s = model.new_sequence()
    expected.append(model.extend(s, p, last_only=True)[-1])
    whole.append(s)


def resumed(idx: list[int], others: int = 0) -> list[bool]:
    forks, items = [], []
    for i in idx:
        p = prompts[i]
        f = model.fork(whole[i])
        model.truncate(f, _cut(len(p), len(p), model))
        forks.append(f)
        items.append((f, p[_cut(len(p), len(p), model) :]))
    runners = []
    for k in range(others):
        r = model.fork(whole[k % len(whole)])
        runners.append(r)
        items.append((r, [42]))
    got = model.extend_many(items, last_only=True)
    for f in forks + runners:
        model.release(f)
    return [bool(np.array_equal(got[j][-1], expected[i])) for j, i in enumerate(idx)]


print(sys.argv[1], "min_tail", model.min_tail)
print("each alone:", [resumed([i])[0] for i in range(4)])
print("two at once:", resumed([0, 1]), resumed([2, 3]))
print("four at once:", resumed([0, 1, 2, 3]))
print("one beside 3 single tokens:", [resumed([i], others=3)[0] for i in range(4)])


def decode_step(idx: list[int]) -> list[bool]:
    """One token after each whole read, fed in one step with the others': the same logits
    as that token fed alone?"""
    alone = []
    for i in idx:
        f = model.fork(whole[i])
        alone.append(model.extend(f, [42], last_only=True)[-1])
        model.release(f)
    forks = [model.fork(whole[i]) for i in idx]
    got = model.extend_many([(f, [42]) for f in forks], last_only=True)
    for f in forks:
        model.release(f)
    return [bool(np.array_equal(got[j][-1], alone[j])) for j in range(len(idx))]


print("a decoding step, two at once:", decode_step([0, 1]), decode_step([2, 3]))
print("a decoding step, four at once:", decode_step([0, 1, 2, 3]))
