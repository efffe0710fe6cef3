import json, collections
ev = json.load(open("/tmp/exp/events.json"))
agg = collections.defaultdict(lambda: [[0]*49, [0]*49])
for k, (tries, passes) in ev.items():
    cat, g, w = eval(k)
    for key in [(g, w), ("all",)]:
        a = agg[key]
        for j in range(49):
            a[0][j] += tries[j]; a[1][j] += passes[j]
for key in sorted(agg, key=str):
    t, p = agg[key]
    cells = " ".join(f"{j}:{p[j]}/{t[j]}={p[j]/t[j]:.2f}" for j in (1,2,3,4,6,8,12,16,24,32) if t[j])
    print(key, cells)
