import sys, time, collections, os
from coinfer.chat.local import open_local_chat
from coinfer.chat.base import ChatRequest
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.bench.workloads import build_suite
from in_flight import run_in_flight
clients = int(sys.argv[1]); per = int(sys.argv[2])
chat = open_local_chat("qwen2.5-coder-1.5b", n_ctx=4096)
model = chat.model
suite = build_suite(per_category=per)
chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
hist = collections.Counter(); secs = collections.defaultdict(float); toks = collections.Counter()
orig = type(model).extend_many_rows
def rows_wrap(self, items, flags):
    t0 = time.perf_counter(); out = orig(self, items, flags); dt = time.perf_counter() - t0
    key = (len(items), tuple(sorted(len(i) for _, i in items)))
    hist[key] += 1; secs[key] += dt
    return out
type(model).extend_many_rows = rows_wrap
dstat = collections.defaultdict(lambda: [0,0,0,0])
od = BatchSpeculator.drafts
def dw(self, rows, others, passes=None):
    out = od(self, rows, others, passes)
    d = dstat[len(rows)+others]; d[0]+=1; d[1]+=sum(1 for x in out.drafts if x) ; d[2]+=out.proposed; d[3]+=sum(map(len,out.drafts))
    return out
BatchSpeculator.drafts = dw
# FLOOR: the batch floor (the served engine: 0; the first runs of 2026-12-05 took the then default, 0.97)
chat.speculator = BatchSpeculator.over(NgramDrafter(), target_costs(model, Learned()), batch_floor=float(os.environ.get("FLOOR", "0")))
jobs, wall, steps = run_in_flight(chat, suite, clients, speculate=os.environ.get("PLAIN") is None)
t = sum(len(j.tokens) for j in jobs)
print(f"{t/wall:.2f} tok/s ({t} in {wall:.1f}s), {steps} steps, drafted {sum(j.drafted for j in jobs)} accepted {sum(j.accepted for j in jobs)}")
sp = chat.speculator
pol = sp.sizer.policy
print("curve ms:", {n: round(v*1000) for n, v in sorted(pol.costs.items())})
print("gate:", sp.gate.rates())
print("step_costs ms:", {n: round(v*1000) for n, v in sorted(chat.step_costs.items())} if hasattr(chat.step_costs, 'items') else chat.step_costs)
tot = collections.Counter()
for (w, shape), c in sorted(hist.items(), key=lambda kv: -kv[1])[:40]:
    print(f"width {w} rows {shape}: {c} steps, {secs[(w,shape)]/c*1000:.0f} ms each")

for w, d in sorted(dstat.items()):
    print(f"width {w}: {d[0]} drafting steps, rows with a draft after the cut {d[1]}, proposed {d[2]}, after the cut {d[3]}")
