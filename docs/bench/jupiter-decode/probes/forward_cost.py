# Run from the repository root: .venv/bin/python docs/bench/jupiter-decode/probes/forward_cost.py float32|bfloat16
import torch, time
torch.set_num_threads(1)
from coinfer.models.load import transformers_folder
from transformers import AutoModelForCausalLM, DynamicCache
folder = transformers_folder("qwen2.5-coder-0.5b")
model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, __import__("sys").argv[1])).eval()
print(model.dtype, model.config.tie_word_embeddings)
ids = torch.randint(0, 1000, (1, 200))
with torch.inference_mode():
    cache = DynamicCache(config=model.config)
    model.model(input_ids=ids, past_key_values=cache, use_cache=True)
    for n in (1, 2, 4, 6, 8, 12, 16):
        ts=[]
        for rep in range(5):
            x = torch.randint(0, 1000, (1, n))
            t=time.perf_counter()
            h = model.model(input_ids=x, position_ids=torch.arange(200,200+n)[None], past_key_values=cache, use_cache=True).last_hidden_state
            t1=time.perf_counter()
            lg = model.lm_head(h)
            t2=time.perf_counter()
            cache.crop(-n)
            ts.append((t1-t,t2-t1))
        ts.sort()
        b,l = ts[2]
        print(n, f"body {b*1000:.1f} ms  lm_head {l*1000:.1f} ms")
    h = torch.randn(4, 896, dtype=model.dtype)
    t=time.perf_counter(); model.lm_head(h); print("4-row head", (time.perf_counter()-t)*1000)
