# Run from the repository root: .venv/bin/python docs/bench/jupiter-decode/probes/heads_accuracy_on_answers.py
import json, torch, sys
from coinfer.models.load import transformers_folder
from coinfer.models.heads import DraftHeads
from transformers import AutoModelForCausalLM, AutoTokenizer
folder = transformers_folder("qwen2.5-coder-0.5b")
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
heads = DraftHeads.load("heads/qwen2.5-coder-0.5b")
d = json.load(open("docs/bench/jupiter-decode/results.json"))
def acc(prompt_text, answer):
    msgs=[{"role":"user","content":prompt_text}]
    p = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    pi = tok(p, add_special_tokens=False).input_ids; ai = tok(answer, add_special_tokens=False).input_ids
    ids = torch.tensor([pi+ai])
    with torch.inference_mode():
        h = model.model(input_ids=ids).last_hidden_state[0]
        start = len(pi)-1
        hs = h[start:]
        g = heads.guesses(hs, model.lm_head, 1)[...,0]  # (n,K)
        nxt = model.lm_head(hs).argmax(-1)
    seq = ai
    K = heads.k; hits=[0]*K; tot=[0]*K; h1own = 0
    for i in range(len(hs)):
        for k in range(K):
            j = i+1+k
            if j < len(seq):
                tot[k]+=1; hits[k]+= int(g[i,k])==seq[j]
    own = sum(int(nxt[i])==seq[i] for i in range(len(seq)))/len(seq)
    return [round(a/max(t,1),3) for a,t in zip(hits,tot)], round(own,3)
for r in d["rows"][:8]:
    print(r["question"][:50], acc(r["question"], r["naive"]["text"]))
