import numpy as np
from coinfer.models import load_model
from coinfer.bench.serve_load import load_prompts
from coinfer.decoding.drafters import common_prefix
model = load_model("smollm2-135m", n_ctx=2048, n_seq_max=8, kv_unified=False)
P = [model.chat_prompt([{"role": "user", "content": p}]) for p in load_prompts(17)]
a, b = P[14], P[15]
c = common_prefix(a, b)
s = model.new_sequence(); ref = model.extend(s, b)[-1]; model.release(s)
def case(name, fn):
    l = fn(); print(f"{name}: max diff {float(np.abs(l - ref).max()):.3g}", flush=True)
def fork_then(batch_with_a):
    A = model.new_sequence(); model.extend(A, a)
    B = model.fork(A); model.truncate(B, c)
    if batch_with_a:
        out = model.extend_many([(A, [5]), (B, b[c:])], last_only=True)
        l = out[1][-1]
    else:
        l = model.extend(B, b[c:])[-1]
    model.release(A); model.release(B); return l
def fresh_batched():
    A = model.new_sequence(); model.extend(A, a)
    B = model.new_sequence()
    out = model.extend_many([(A, [5]), (B, b)], last_only=True)
    l = out[1][-1]; model.release(A); model.release(B); return l
case("fork, alone", lambda: fork_then(False))
case("fork, batched with the source", lambda: fork_then(True))
case("fresh, batched with another", fresh_batched)
sa = model.new_sequence(); refA = model.extend(sa, a + [5])[-1]; model.release(sa)
def fork_with_other():
    X = model.new_sequence(); model.extend(X, P[3])
    A = model.new_sequence(); model.extend(A, a)
    B = model.fork(A); model.truncate(B, c)
    out = model.extend_many([(X, [7]), (B, b[c:])], last_only=True)
    l = out[1][-1]; [model.release(q) for q in (A, B, X)]; return l
case("fork, batched with another (source idle)", fork_with_other)
def source_logits():
    A = model.new_sequence(); model.extend(A, a)
    B = model.fork(A); model.truncate(B, c)
    out = model.extend_many([(A, [5]), (B, b[c:])], last_only=True)
    l = out[0][-1]; model.release(A); model.release(B); return l
l = source_logits(); print("source's own logits when batched with its fork: max diff", float(np.abs(l - refA).max()))
def fork_order(rev):
    A = model.new_sequence(); model.extend(A, a)
    B = model.fork(A); model.truncate(B, c)
    items = [(B, b[c:]), (A, [5])] if rev else [(A, [5]), (B, b[c:])]
    out = model.extend_many(items, last_only=True)
    l = out[0 if rev else 1][-1]; model.release(A); model.release(B); return l
case("fork batched with source, fork first", lambda: fork_order(True))
def two_forks():
    A = model.new_sequence(); model.extend(A, a)
    B1 = model.fork(A); model.truncate(B1, c); B2 = model.fork(A); model.truncate(B2, c)
    out = model.extend_many([(B1, b[c:]), (B2, b[c:])], last_only=True)
    l = out[1][-1]; [model.release(q) for q in (A, B1, B2)]; return l
case("two forks of one source batched together", two_forks)
def materialized():
    A = model.new_sequence(); model.extend(A, a)
    B = model.fork(A); model.truncate(B, c)
    model.extend(B, b[c:c+1])
    out = model.extend_many([(A, [5]), (B, b[c+1:])], last_only=True)
    l = out[1][-1]; model.release(A); model.release(B); return l
case("fork read one token alone first, then batched with its source", materialized)
def other_then():
    X = model.new_sequence(); model.extend(X, P[3])
    A = model.new_sequence(); model.extend(A, a)
    B = model.fork(A); model.truncate(B, c)
    model.extend_many([(X, [7])], last_only=True)   # some other decode materializes the copy
    out = model.extend_many([(A, [5]), (B, b[c:])], last_only=True)
    l = out[1][-1]; [model.release(q) for q in (A, B, X)]; return l
case("an unrelated decode first, then fork batched with its source", other_then)
def released_then_fresh():
    A = model.new_sequence(); model.extend(A, a)
    B = model.fork(A); model.truncate(B, c)
    model.release(A); C = model.new_sequence(); model.extend(C, a)
    out = model.extend_many([(C, [5]), (B, b[c:])], last_only=True)
    l = out[1][-1]; model.release(C); model.release(B); return l
case("source released, a new sequence on its stream, batched with the fork", released_then_fresh)
def taken():
    A = model.new_sequence(); model.extend(A, a)
    B = model.fork(A); model.truncate(B, c); model.truncate(A, c)
    out = model.extend_many([(A, b[c:]), (B, b[c:])], last_only=True)
    l = out[1][-1]; l0 = out[0][-1]; model.release(A); model.release(B)
    print("   taken source's own:", float(np.abs(l0 - ref).max())); return l
case("source truncated to the share (taken), batched with the fork", taken)
s = model.new_sequence(); ref2 = model.extend(s, b + [9])[-1]; model.release(s)
def decode_phase():
    A = model.new_sequence(); model.extend(A, a)
    B = model.fork(A); model.truncate(B, c); model.extend(B, b[c:])
    out = model.extend_many([(A, [5]), (B, [9])], last_only=True)
    l = out[1][-1]; model.release(A); model.release(B); return l
l = decode_phase(); print("fork's decode step batched with its source (1 token each): max diff", float(np.abs(l - ref2).max()))
def decode_phase_fresh_neighbor():
    A = model.new_sequence(); model.extend(A, a)
    B = model.fork(A); model.truncate(B, c); model.extend(B, b[c:])
    model.release(A); X = model.new_sequence(); model.extend(X, P[3])
    out = model.extend_many([(X, [5]), (B, [9])], last_only=True)
    l = out[1][-1]; model.release(X); model.release(B); return l
l = decode_phase_fresh_neighbor(); print("fork's decode step batched with a fresh neighbour: max diff", float(np.abs(l - ref2).max()))
