"""Evaluate policy configs under several cost curves (measured, smooth, jittered) for robustness."""
import json, sys, functools, math, random, collections
sys.path.insert(0, "/tmp/exp")
import sim
from qpol import QPolicy, shaped
BASE = dict(sim.COST)
def smooth():  # a concave fit: 32 + 30*(n-1)^0.8... fit to a few points
    return {n: 32 * (1 + 0.95 * (n - 1) ** 0.78) for n in range(1, 65)}
def jitter(seed):
    r = random.Random(seed)
    return {n: v * r.uniform(0.9, 1.1) if n > 1 else v for n, v in BASE.items()}
CURVES = {"meas": BASE, "smooth": smooth(), "j1": jitter(1), "j2": jitter(2)}
def run_all(data, make):
    geos, mins, cats = [], [], collections.defaultdict(list)
    for name, curve in CURVES.items():
        sim.COST = curve
        by = collections.defaultdict(list)
        for v in data.values():
            by[v["category"]].append(sim.simulate(v["prompt"], v["plain"], make()))
        g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
        allx = [x for xs in by.values() for x in xs]
        geos.append(g(allx)); mins.append(min(allx))
        for c, xs in by.items(): cats[c].append(g(xs))
    sim.COST = BASE
    return geos, mins, {c: sum(v) / len(v) for c, v in cats.items()}
def run_simple_all(data):
    geos, mins, cats = [], [], collections.defaultdict(list)
    for name, curve in CURVES.items():
        sim.COST = curve
        by = collections.defaultdict(list)
        for v in data.values():
            by[v["category"]].append(sim.simulate_simple(v["prompt"], v["plain"]))
        g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
        allx = [x for xs in by.values() for x in xs]
        geos.append(g(allx)); mins.append(min(allx))
        for c, xs in by.items(): cats[c].append(g(xs))
    sim.COST = BASE
    return geos, mins, {c: sum(v) / len(v) for c, v in cats.items()}
def show(label, res):
    geos, mins, cats = res
    print(f"{label[:60]:60s} geo {sum(geos)/len(geos):.3f} [{' '.join(f'{g:.3f}' for g in geos)}] min {min(mins):.3f} " + " ".join(f"{c[:5]} {v:.2f}" for c, v in cats.items()), flush=True)
if __name__ == "__main__":
    data = json.load(open(f"/tmp/exp/plain_{sys.argv[1]}.json"))
    if len(sys.argv) > 3: show("ngram-simple", run_simple_all(data))
    for cfg in json.loads(sys.argv[2]):
        label = json.dumps(cfg)
        prior = cfg.pop("prior", None)
        if prior: cfg["prior_fn"] = shaped(*prior)
        # fresh shared cost dict per curve, via a factory capturing one dict per run_all call
        holder = {}
        def make(cfg=cfg):
            return functools.partial(QPolicy, costs=holder.setdefault(id(sim.COST), {}), **cfg)
        show(label, run_all(data, make))
