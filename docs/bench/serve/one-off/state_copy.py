"""What copying a sequence's llama.cpp cache out to host memory and back costs (coinfer serve --cache-ram):
Qwen2.5-Coder-1.5B, 350 tokens read into one sequence; SteerableModel.save_state and restore, against
llama.cpp's calls on a bytearray directly, three times. Usage: state_copy.py"""
import time, ctypes
from coinfer.chat.local import open_local_chat
chat = open_local_chat("qwen2.5-coder-1.5b", n_ctx=4096, parallel=4, keep=2)
m = chat.model; lc, ctx = m._lc, m._ctx.ctx
prompt = m.chat_prompt([{"role":"user","content":"Write a python function that parses a CSV file and returns a list of dicts. " * 20}])[:430]
a = m.new_sequence(); m.extend_many_greedy([(a, prompt)])
for trial in range(3):
    t=time.perf_counter(); st = m.save_state(a); t1=time.perf_counter()-t
    t=time.perf_counter(); n = lc.llama_state_seq_get_size(ctx, a.llama_id); buf = bytearray(n); arr=(ctypes.c_uint8*n).from_buffer(buf); lc.llama_state_seq_get_data(ctx, arr, n, a.llama_id); t2=time.perf_counter()-t
    t=time.perf_counter(); b = m.restore(st); t3=time.perf_counter()-t; m.release(b)
    t=time.perf_counter(); b = m.new_sequence(); arr=(ctypes.c_uint8*n).from_buffer(buf); lc.llama_state_seq_set_data(ctx, arr, n, b.llama_id); t4=time.perf_counter()-t; m.release(b)
    print(f"{len(prompt)} tokens, {st.nbytes/1e6:.1f} MB: save {t1*1000:.1f} ms (one copy: {t2*1000:.1f}), restore {t3*1000:.1f} ms (no copy: {t4*1000:.1f})")
