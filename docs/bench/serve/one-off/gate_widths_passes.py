"""The drafting steps of gate_widths.py's runs against one forward over all their rows:
each drafting step's measured seconds (its llama.cpp passes, one per distinct row count
with a cache per conversation) over the cost curve's price of one forward over the same
rows (cost_curve_avx2.txt, one sequence, interpolated), per number of passes. Usage:
gate_widths_passes.py OUT"""
import bisect, collections, json, sys

CURVE = {1: 97.3, 2: 150.5, 4: 225.5, 8: 512.1, 12: 691.2, 16: 716.2, 24: 1133.7, 32: 1331.8,
         48: 1801.6, 64: 2330.9, 96: 3276.9}  # ms, cost_curve_avx2.txt


def price(n):
    xs = sorted(CURVE)
    if n >= xs[-1]:
        return CURVE[xs[-1]] * n / xs[-1]
    i = bisect.bisect_left(xs, n)
    if xs[i] == n:
        return CURVE[n]
    a, b = xs[i - 1], xs[i]
    return CURVE[a] + (CURVE[b] - CURVE[a]) * (n - a) / (b - a)


for cfg, d in json.load(open(sys.argv[1])).items():
    by = collections.defaultdict(lambda: [0, 0.0, 0.0, 0])
    for s in d["steps"]:
        if s["read"] or not s["lens"] or sum(s["lens"]) <= len(s["lens"]):
            continue
        b = by[len(s["passes"])]
        b[0] += 1; b[1] += s["s"] * 1000; b[2] += price(sum(s["lens"])); b[3] += sum(s["lens"])
    for p in sorted(by):
        c, ms, one, rows = by[p]
        print(f"{cfg} drafting steps in {p} passes: {c:3d}, {rows / c:5.1f} rows each, measured / one forward priced {ms / one:.2f}")
