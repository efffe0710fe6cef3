"""Speculative steps priced by their passes and evened (batch_shape), in process: the
tune (or held-out) prompts of build_suite(6), WIDTH at a time through one LocalChat loaded
as `coinfer serve` loads its target (a cache per conversation, 8 slots), as the served
speculative engine drafts (n-gram, batch floor 0). Configurations, alternated in one
process: `plain`; `flat`, the code before (a step priced as one forward over its rows,
never evened); `shaped`, the code since. Records each step as gate_widths.py does, for
gate_widths_steps.py. Usage: [PER=11] batch_shapes_ab.py WIDTH plain,flat,shaped N tune|held OUT"""
import sys, time, json, os
from coinfer.models import load_model
from coinfer.chat.local import LocalChat
from coinfer.chat.base import ChatRequest
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.bench.workloads import build_suite

width = int(sys.argv[1]); configs = sys.argv[2].split(","); n = int(sys.argv[3]); half = sys.argv[4]; out = sys.argv[5]
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=8 + 2, kv_unified=False)
suite = build_suite(per_category=int(os.environ.get("PER", "6")))  # PER=11: 8 held out
which = {"tune": [p for i, p in enumerate(suite) if i % 4 != 3], "held": [p for i, p in enumerate(suite) if i % 4 == 3]}[half]
reqs = [ChatRequest(messages=p["messages"], max_tokens=128, temperature=0.0) for p in which[:n]]
chat = LocalChat(model, max_concurrent=width, keep=0)
chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
passes = []
orig_rows = model._decode_rows
def rows_counted(rows, *a, **k):
    passes.append(len(rows)); return orig_rows(rows, *a, **k)
model._decode_rows = rows_counted
shaped_rows, shaped_passes = type(model).pass_rows, LocalChat._passes
results = {}
for ci, cfg in enumerate(configs):
    learned = Learned()  # each configuration learns its own cost curve
    if cfg == "plain":
        chat.speculator = None
    else:
        chat.speculator = BatchSpeculator.over(NgramDrafter(), target_costs(model, learned), batch_floor=0.0)
    if cfg == "flat":
        model.pass_rows = lambda items: [sum(k for _, k in items)]
        chat._passes = lambda seqs: None
    else:
        model.pass_rows = lambda items: shaped_rows(model, items)
        chat._passes = lambda seqs: shaped_passes(chat, seqs)
    cur = {}
    orig_ext = model.extend_many_choices
    def ext(items, orig_ext=orig_ext, cur=cur):
        passes.clear(); t0 = time.perf_counter(); r = orig_ext(items)
        cur["lens"] = [len(ids) for _, ids in items]; cur["passes"] = list(passes); cur["s"] = time.perf_counter() - t0
        return r
    model.extend_many_choices = ext
    orig_step = LocalChat.step
    steps = []
    def step(waiting, running, orig_step=orig_step, cur=cur):
        cur.clear(); passes.clear()
        before = sum(len(j.tokens) for j in running); reading = any(j.reading for j in running) or bool(waiting and len(running) < width)
        t0 = time.perf_counter()
        r = orig_step(chat, waiting, running)
        s = time.perf_counter() - t0
        steps.append({"w": len(running), "lens": cur.get("lens"), "passes": cur.get("passes") or list(passes), "s": round(s, 4), "read": reading,
                      "tok": sum(len(j.tokens) for j in running) - before})
        return r
    chat.step = lambda w, r: step(w, r)
    t0 = time.perf_counter(); outs = chat.chat_batch(reqs); wall = time.perf_counter() - t0
    model.extend_many_choices = orig_ext; del chat.step
    toks = sum(o.usage.completion_tokens for o in outs)
    g = chat.speculator.gate.rates() if chat.speculator is not None and chat.speculator.gate else {}
    print(f"width {width} {cfg}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f}s) gate {g}", flush=True)
    results[f'{ci}:{cfg}'] = {"tok_s": toks / wall, "steps": steps, "texts": [o.text for o in outs]}
json.dump(results, open(out, "w"))
