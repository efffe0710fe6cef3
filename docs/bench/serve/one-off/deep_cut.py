"""How much of each verified n-gram draft the target would have kept had the cut let all of
the drafter's proposal through: the 16 prompts of the 16-client level, all at once, 8 slots,
in process as coinfer serve batches them (speculative: n-gram, floor 0, the gate). After the
run (greedy), each proposal is compared with the tokens the request went on to produce.
Prints, per match grade: drafts verified, tokens proposed, verified, kept, and what the
whole proposal would have kept. Usage: deep_cut.py [PER] [FIRST,LAST]"""
import sys, time
from collections import deque, defaultdict
from coinfer.decoding.sampling import SamplingParams
from served_batch import open_served_batch, watch_verified

per = int(sys.argv[1]) if len(sys.argv) > 1 else 11
lo, hi = (int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "0,16").split(","))
chat, model, suite, spec = open_served_batch(per)
proposals, verified, width = {}, [], {}
def record(key, draft, kept):
    at, d = proposals[key]
    verified.append((key, at, list(d.tokens), getattr(d.bucket, "match", None), len(draft), kept, width["w"]))
watch_verified(spec, proposals, record)
orig_drafts, cuts = spec.drafts, []
def drafts(rows, others, passes=None):
    step = orig_drafts(rows, others, passes)
    if any(step.drafts):
        _, most = spec.sizer.policy._pricing()
        cuts.append((len(rows) + others, [len(d) for d in step.drafts], [getattr(proposals[k][1].bucket, "match", None) for k, _, _ in rows],
                     [len(proposals[k][1].tokens) for k, _, _ in rows], step.width, most))
    return step
spec.drafts = drafts
jobs = []
for i in range(lo, hi):
    prompt = model.chat_prompt(suite[i]["messages"])
    jobs += chat.new_jobs(i, prompt, n=1, max_tokens=128, params=SamplingParams(temperature=0.0))
by_key = {j.key: j for j in jobs}
waiting, running = deque(jobs), []
t0 = time.perf_counter()
while waiting or running:
    width["w"] = len(running)
    running = chat.step(waiting, running)
wall = time.perf_counter() - t0
toks = sum(len(j.tokens) for j in jobs)
print(f"{toks/wall:.2f} tok/s ({toks} in {wall:.1f}s) gate {spec.gate.rates()}", flush=True)
rows = defaultdict(lambda: [0, 0, 0, 0, 0, 0])
for key, at, tokens, match, n, kept, w in verified:
    full = by_key[key].prompt + by_key[key].tokens
    would = 0
    while would < len(tokens) and at + would < len(full) and full[at + would] == tokens[would]:
        would += 1
    r = rows[(match, "w>=6" if w >= 6 else "w<6")]
    r[0] += 1; r[1] += len(tokens); r[2] += n; r[3] += kept; r[4] += would; r[5] += (n < len(tokens) and kept == n)
print("(match, width): drafts, proposed, verified, kept, kept had all been verified, cut while whole")
for k in sorted(rows, key=lambda k: (k[1], -(k[0] or 0))):
    print(k, rows[k])
print("steps with a deep copy (grade 32): width, cut per request, grades, proposed, evened to, most")
for c in cuts:
    if 32 in c[2]:
        print(c)
# what the cut sees at the end: the curve, the forward's cap, a deep copy's survival
from coinfer.decoding.batch_shape import batch_lengths
from coinfer.decoding.draft_length import CopyBucket
policy = spec.sizer.policy
cost, most = policy._pricing()
print("curve", {n: round(cost(n), 3) for n in sorted(policy._fresh())}, "most", most,
      "miss ratio", round(policy.copy_miss_ratio(), 3))
surv = policy.survival(CopyBucket(32, True), upto=48)[1:]
print("survival(32, warm)", [round(s, 3) for s in surv[::4]])
for others in (7, 5, 3):
    price = lambda rows: cost(sum(rows[:-1])) + cost(rows[-1])  # the others' pass, the drafter's
    for cap in (most, 10**6):
        cut = batch_lengths([[]] * others + [surv], cost, floor=0.0, most=cap, price=price,
                            required_gain=policy.required_gain)
        print(f"width {others + 1}, most {cap}: deep draft verified {cut[-1]}")
