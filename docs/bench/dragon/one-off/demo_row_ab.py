"""DRAGON's demo row at two checkouts, alternating: the NumPy encoder (after) against torch (before)."""
import json, os, subprocess, sys, time
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
code = ("import json,sys; from pathlib import Path; from coinfer.bench.demo import DemoConfig, dragon_row;"
        "r=dragon_row(DemoConfig(out=Path(sys.argv[1]))); "
        "print(json.dumps({'ratio': r.ratio, 'did': r.did, 'engine': r.runs.get('engine',{}).get('tokens_per_s'),"
        " 'alone': r.runs.get('baseline',{}).get('tokens_per_s'), 'error': r.error}))")
for i in range(ROUNDS):
    for name in ("before", "after"):
        env = {**os.environ, "PYTHONPATH": f"/tmp/{name}/src"}
        t = time.time()
        p = subprocess.run([sys.executable, "-c", code, f"/tmp/dragonab/{name}{i}"], env=env, capture_output=True, text=True)
        out = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-500:]
        print(name, i, f"{time.time()-t:.1f}s", out, flush=True)
