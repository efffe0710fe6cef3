import json, sys
sys.path.insert(0, "/tmp/exp")
import sim
data = json.load(open(f"/tmp/exp/plain_{sys.argv[1]}.json"))
v = data[sys.argv[2]]; prompt, plain = v["prompt"], v["plain"]; n, m = 12, 48
context = list(prompt) + [plain[0]]; produced = 1; total = 0
while produced < len(plain):
    draft = []; L = len(context)
    if L > n + m + 1:
        pat = context[L - n:]
        for j in range(L - n - 1, 0, -1):
            if context[j:j + n] == pat:
                cm = min(m, L - (j + n))
                if cm >= n: draft = context[j + n:j + n + cm]
                break
    draft = draft[:max(0, len(plain) - produced - 1)]
    k = 0
    while k < len(draft) and draft[k] == plain[produced + k]: k += 1
    if draft: print(produced, "draft", len(draft), "kept", k)
    total += sim.cost(len(draft) + 1)
    context += plain[produced:produced + k + 1]; produced += k + 1
print("total ms", total, "plain", (len(plain) - 1) * 32)
