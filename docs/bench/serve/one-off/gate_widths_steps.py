"""The decoding-only steps of gate_widths.py's runs, by width, drafting or not, and the
passes a drafting step ran in; each run's decoding-only seconds over its reading seconds
(the same prompts in every run: the machine's speed of the moment divided out)."""
import json, sys, collections
r = json.load(open(sys.argv[1]))
for cfg, d in r.items():
    st = d["steps"]
    dec = [s for s in st if not s["read"]]
    rd = [s for s in st if s["read"]]
    ds, rs, dt = sum(s['s'] for s in dec), sum(s['s'] for s in rd), sum(s['tok'] for s in dec)
    print(f"== {cfg}: {d['tok_s']:.2f} tok/s; decoding-only {len(dec)} steps ({ds:.1f}s, {dt} tok), reading {len(rd)} ({rs:.1f}s); "
          f"decoding s / reading s per 1600 decoded tokens: {ds / rs * 1600 / dt:.3f}")
    by = collections.defaultdict(lambda: [0, 0, 0.0])
    for s in dec:
        w = s["w"]; drafted = bool(s["lens"]) and sum(s["lens"]) > len(s["lens"])
        key = (w, "draft" if drafted else "plain", len(s["passes"]) if drafted else 1)
        b = by[key]; b[0] += 1; b[1] += s["tok"]; b[2] += s["s"]
    for k in sorted(by):
        if k[0] < 3: continue
        c, t, sec = by[k]
        print(f"  width {k[0]} {k[1]:5s} passes {k[2]}: {c:4d} steps {t:5d} tok {sec:7.1f}s = {t/sec:6.2f} tok/s, {sec/c*1000:6.0f} ms/step")
