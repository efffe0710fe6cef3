import json, collections
from coinfer.models import load_model
from coinfer.bench.broad_suite import broad_suite, split_suite
from coinfer.decoding import SpecConfig, NgramDrafter
from coinfer.decoding.speculative import generate_rounds
import coinfer.decoding.speculative as S
from coinfer.decoding.draft_length import AdaptiveDraftLength
events = collections.defaultdict(lambda: [[0]*49, [0]*49])
class Rec(AdaptiveDraftLength):
    def learn(self, *, bucket, position, kept):
        e = events[(self.cat,) + tuple(bucket)]; e[0][position] += 1; e[1][position] += kept
        super().learn(bucket=bucket, position=position, kept=kept)
items = split_suite(broad_suite(8), "tune")
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp")
for it in items:
    Rec.cat = it["category"]
    S._length_policy = lambda config: Rec()
    p = t.chat_prompt(it["messages"])
    list(generate_rounds(t, p, draft=NgramDrafter(), config=SpecConfig(max_tokens=192)))
json.dump({repr(k): v for k, v in events.items()}, open("/tmp/exp/events.json", "w"))
print("done")
