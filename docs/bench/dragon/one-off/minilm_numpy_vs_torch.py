# MiniLM embeddings: the NumPy encoder (retrieval/minilm.py) against transformers on torch, 66 chunks
# (64 of 150 random words, truncated at 256 tokens, and two short), 32 per batch; NumPy twice, then torch
# once, then the largest difference between their unit vectors. python minilm_numpy_vs_torch.py
import time, numpy as np, random, sys
from coinfer.retrieval.minilm import MiniLM
from coinfer.retrieval.dense import minilm_dir
m = MiniLM(minilm_dir())
random.seed(0)
words = open(__import__("coinfer.retrieval.dense", fromlist=["x"]).__file__).read().split()
texts = [" ".join(random.choice(words) for _ in range(150)) for _ in range(64)] + ["short", "I am Ada."]
for rep in range(2):
    t=time.time()
    hs=[m.encode(texts[i:i+32]) for i in range(0,66,32)]
    print("numpy 66 chunks", round(time.time()-t,2))
def pool(h,mask):
    mean=(h*mask[...,None]).sum(1)/np.maximum(mask.sum(1),1)[:,None]; return mean/np.linalg.norm(mean,axis=1,keepdims=True)
ours=np.concatenate([pool(*x) for x in hs])
if len(sys.argv) > 1: sys.exit()
import torch
from transformers import AutoModel, AutoTokenizer
tok = AutoTokenizer.from_pretrained(minilm_dir()); mod = AutoModel.from_pretrained(minilm_dir()).eval()
refs=[]
t=time.time()
with torch.inference_mode():
    for i in range(0,66,32):
        b = tok(texts[i:i+32], padding=True, truncation=True, max_length=256, return_tensors="pt"); hid=mod(**b).last_hidden_state
        mk=b["attention_mask"].unsqueeze(-1).float(); refs.append(torch.nn.functional.normalize((hid*mk).sum(1)/mk.sum(1),dim=-1).numpy())
print("torch 66 chunks", round(time.time()-t,2))
print("max abs diff", np.abs(ours-np.concatenate(refs)).max())
