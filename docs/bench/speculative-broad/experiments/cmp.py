import json, sys, importlib.util, functools
sys.path.insert(0, "/tmp/exp")
import sim
from coinfer.decoding.draft_length import AdaptiveDraftLength
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec); sys.modules[name] = m; spec.loader.exec_module(m); return m
old_dl = load("old_dl", "/tmp/exp/old_dl.py"); old_ng = load("old_ng", "/tmp/exp/old_ngram.py")
data = json.load(open(sys.argv[1]))
def run_with(ngram_cls, policy, label):
    orig = sim.NgramDrafter; sim.NgramDrafter = ngram_cls
    try: sim.run(data, policy, label)
    finally: sim.NgramDrafter = orig
run_with(old_ng.NgramDrafter, old_dl.AdaptiveDraftLength, "old")


for kw in sys.argv[2:]:
    shared = {}
    sim.run(data, functools.partial(AdaptiveDraftLength, costs=shared, **json.loads(kw)), "shared " + kw)
