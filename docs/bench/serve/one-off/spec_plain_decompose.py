import json, sys, statistics as st
d = json.load(open(sys.argv[1]))
S = d['systems']
for lvl_i in range(len(S['coinfer-plain'])):
    P, Q = S['coinfer-plain'][lvl_i], S['coinfer-speculative'][lvl_i]
    print("clients", P['clients'])
    for r, (pr, qr) in enumerate(zip(P['timelines'], Q['timelines'])):
        def agg(rnd):
            ttft = sum(t[2]-t[1] for t in rnd); dec = sum(t[3]-t[2] for t in rnd); toks = sum(t[4] for t in rnd)
            wall = max(t[3] for t in rnd) - min(t[1] for t in rnd)
            return ttft, dec, toks, wall
        a, b = agg(pr), agg(qr)
        print(f" round {r}: plain ttft-sum {a[0]:.1f} decode-sum {a[1]:.1f} toks {a[2]} wall {a[3]:.1f} | spec ttft-sum {b[0]:.1f} decode-sum {b[1]:.1f} toks {b[2]} wall {b[3]:.1f} | decode per token ratio {a[1]/a[2]/(b[1]/b[2]):.3f} wall ratio (tok/s) {(b[2]/b[3])/(a[2]/a[3]):.3f}")
