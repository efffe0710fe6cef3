import json, sys, functools
sys.path.insert(0, "/tmp/exp")
import sim
from qpol import QPolicy, shaped
splits = sys.argv[1].split(",")
datas = {s: json.load(open(f"/tmp/exp/plain_{s}.json")) for s in splits}
for cfg in json.loads(sys.argv[2]):
    label = json.dumps(cfg)
    prior = cfg.pop("prior", None); dk = cfg.pop("drafter", {})
    if prior: cfg["prior_fn"] = shaped(*prior)
    for s, data in datas.items():
        sim.run(data, functools.partial(QPolicy, costs={}, **cfg), f"{s[:5]} {label}"[:70], drafter_kw=dk)
