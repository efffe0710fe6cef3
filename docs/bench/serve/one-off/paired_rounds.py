"""Paired ratios from a repeated concurrency run: per round, coinfer / llama-server."""
import json, sys, statistics as st
r = json.load(open(sys.argv[1]))
sy = r["systems"]; names = list(sy)
a, b = names
for ra, rb in zip(sy[a], sy[b]):
    c = ra["clients"]
    tok = [x / y for x, y in zip(ra["tok_s_runs"], rb["tok_s_runs"])]
    ttft = [x / y for x, y in zip(ra["ttft_p50_s_runs"], rb["ttft_p50_s_runs"])]
    print(f"{c:3} clients: {a} / {b} tok/s per round {[round(x,3) for x in tok]} (median {st.median(tok):.3f});"
          f" TTFT p50 per round {ra['ttft_p50_s_runs']} vs {rb['ttft_p50_s_runs']} (ratios {[round(x,3) for x in ttft]})")
    print(f"    pooled TTFT p50 {ra['ttft_p50_s']} vs {rb['ttft_p50_s']}; held out {ra['held_out']['ttft_p50_s']} vs {rb['held_out']['ttft_p50_s']};"
          f" tuned {ra['tuned']['ttft_p50_s']} vs {rb['tuned']['ttft_p50_s']}; identical {ra['identical']}/{ra['requests']} vs {rb['identical']}/{rb['requests']}")
    for name, row in ((a, ra), (b, rb)):
        for i, tl in enumerate(row["timelines"]):
            firsts = sorted(f - s for _, s, f, _, _ in tl if f is not None)
            print(f"    {name} round {i+1}: sorted TTFT {[round(x,1) for x in firsts]}")
