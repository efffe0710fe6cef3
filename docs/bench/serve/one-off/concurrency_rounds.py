import json, sys, statistics as st
d = json.load(open(sys.argv[1]))
held = {i for i, p in enumerate(d['prompts']) if p['held_out']}
for name in d['systems']:
    for L in d['systems'][name]:
        tl = L['timelines']
        per = []
        for rnd in tl:
            h = [t[4] / (t[3] - t[1]) for t in rnd if t[0] in held and t[3] > t[1]]
            u = [t[4] / (t[3] - t[1]) for t in rnd if t[0] not in held and t[3] > t[1]]
            ttft = [t[2] - t[1] for t in rnd]
            per.append((st.mean(h) if h else 0, st.mean(u) if u else 0, st.median(ttft), st.mean(ttft)))
        pooled = st.median([t[2] - t[1] for rnd in tl for t in rnd])
        print(f"{name:24s} {L['clients']:3d} tok/s {L['tok_s_runs']} ttft med/mean per round {[f'{p[2]:.2f}/{p[3]:.2f}' for p in per]} pooled {pooled:.2f}; per-request tok/s held {[round(p[0],2) for p in per]} tuned {[round(p[1],2) for p in per]}; identical {L['identical']}/{L['requests']} errors {len(L['errors'])} alone-pass errors {d.get('reference_errors', {}).get(name)}")
