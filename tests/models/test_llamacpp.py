"""llama.cpp specifics: the crash probe for its extra CPU kernels."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from coinfer.errors import ModelError
from coinfer.models import llamacpp, llamacpp_tiled
from coinfer.models.base import Forward
from tests.conftest import needs_llama

pytestmark = needs_llama


@pytest.fixture
def probe_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("COINFER_CACHE", str(tmp_path))
    monkeypatch.delenv("COINFER_LLAMA_EXTRA_BUFFERS", raising=False)
    return tmp_path


def test_a_crashing_kernel_is_detected_once_and_remembered(
    probe_cache: Path, smollm_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(llamacpp, "_PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert llamacpp.cpu_extra_buffers_work(smollm_path) is False
    warned = [r for r in caplog.records if r.levelname == "WARNING" and r.name.startswith("coinfer.")]
    assert any("crashes in its extra CPU kernels" in r.getMessage() for r in warned)  # logged, not printed
    monkeypatch.setattr(llamacpp, "_PROBE", "raise SystemExit('must not run again')")
    assert llamacpp.cpu_extra_buffers_work(smollm_path) is False  # cached per build and model


def test_an_ordinary_probe_error_keeps_the_fast_kernels(
    probe_cache: Path, smollm_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llamacpp, "_PROBE", "raise SystemExit(1)")
    assert llamacpp.cpu_extra_buffers_work(smollm_path) is True
    assert not (probe_cache / "probes").exists() or not any((probe_cache / "probes").iterdir())


def _load_and_decode(path: Path) -> bool:
    """Load with the default (probed or overridden) setting, decode, return that setting."""
    model = llamacpp.LlamaCppModel(path, n_ctx=128)
    try:
        assert model.extend(model.new_sequence(), [1, 2, 3]).shape == (3, model.vocab_size)
        return model.extra_buffers
    finally:
        model.close()


def test_the_real_probe_answer_is_safe_to_use(probe_cache: Path, smollm_path: Path) -> None:
    """Whatever the probe says, a model loaded with that setting decodes (a wrong "yes" crashes here)."""
    works = llamacpp.cpu_extra_buffers_work(smollm_path)
    assert _load_and_decode(smollm_path) is works


def test_the_environment_overrides_the_probe(
    probe_cache: Path, smollm_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(llamacpp, "_PROBE", "raise SystemExit('the override skips the probe')")
    monkeypatch.setenv("COINFER_LLAMA_EXTRA_BUFFERS", "0")
    assert _load_and_decode(smollm_path) is False


def test_coinfer_takes_llama_cpps_tiled_kernel_from_16_rows_unless_told_otherwise(
    smollm_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps of 8 to 15 rows (a batch of 8, 4 requests with a draft token each) ran faster
    without the tiled K-quant kernel; a user's own setting is kept."""
    monkeypatch.delenv(llamacpp_tiled.TILED_MIN_ROWS_ENV, raising=False)
    _load_and_decode(smollm_path)
    assert os.environ[llamacpp_tiled.TILED_MIN_ROWS_ENV] == str(llamacpp_tiled.TILED_MIN_ROWS) == "16"
    monkeypatch.setenv(llamacpp_tiled.TILED_MIN_ROWS_ENV, "64")
    _load_and_decode(smollm_path)
    assert os.environ[llamacpp_tiled.TILED_MIN_ROWS_ENV] == "64"


def test_the_llama_cpp_that_setup_builds_reads_the_tiled_threshold() -> None:
    """scripts/build-llama-wheel.sh applies scripts/patches: without them the setting above does nothing."""
    import llama_cpp

    libs = sorted((Path(llama_cpp.__file__).parent / "lib").glob("libggml-cpu*"))
    assert libs, "llama-cpp-python ships no libggml-cpu"
    assert any(llamacpp_tiled.TILED_MIN_ROWS_ENV.encode() in lib.read_bytes() for lib in libs), (
        f"llama-cpp-python {llama_cpp.__version__} is not scripts/build-llama-wheel.sh's: run make setup"
    )


def test_running_out_of_sequence_slots_says_what_to_do(smollm_path: Path) -> None:
    model = llamacpp.LlamaCppModel(smollm_path, n_ctx=256, n_seq_max=4)
    try:
        seqs = [model.new_sequence() for _ in range(2)]
        model.extend(seqs[0], [1, 2])
        with pytest.raises(ModelError, match="free sequence slots") as info:
            model.extend(seqs[0], [3, 4, 5], parents=[-1, -1, -1])  # three leaves, two slots left
        assert "n_seq_max" in (info.value.hint or "")
        assert seqs[0].tokens == [1, 2] and seqs[0].pending is None
        model.extend(seqs[0], [3, 4], parents=[-1, -1])  # two leaves fit, and are given back
        model.commit_path(seqs[0], [1])
        model.new_sequence()
        model.new_sequence()
        with pytest.raises(ModelError, match="sequence slots are in use"):
            model.new_sequence()
    finally:
        model.close()


def test_a_merged_forward_that_runs_out_of_slots_gives_back_the_slots_it_took(smollm_path: Path) -> None:
    """Two requests' trees in one batch: the second finds no slots left; the first's
    are given back, so both sequences go on as if the batch had never been tried."""
    model = llamacpp.LlamaCppModel(smollm_path, n_ctx=256, n_seq_max=6)
    try:
        a, b = model.new_sequence(), model.new_sequence()
        model.extend_many([(a, [1, 2]), (b, [1, 2])])
        three = Forward(a, [3, 4, 5], parents=[-1, -1, -1])
        with pytest.raises(ModelError, match="free sequence slots"):
            model.extend_batch([three, Forward(b, [3, 4], parents=[-1, -1])])  # 3 + 2 leaves, 4 slots
        assert a.pending is None and b.pending is None and a.tokens == b.tokens == [1, 2]
        tree, chain = model.extend_batch([three, Forward(b, [6])])  # the three slots are free again
        assert tree.shape == (3, model.vocab_size) and chain.shape == (1, model.vocab_size)
    finally:
        model.close()


def test_separate_caches_give_each_sequence_its_own_window(smollm_path: Path) -> None:
    """kv_unified=False: every sequence has n_ctx cells of its own (conversations decoded
    together); the logits match a unified cache's, and trees are refused clearly."""
    separate = llamacpp.LlamaCppModel(smollm_path, n_ctx=256, n_seq_max=3, kv_unified=False)
    unified = llamacpp.LlamaCppModel(smollm_path, n_ctx=256, n_seq_max=3)
    try:
        assert not separate.kv_cells_shared and unified.kv_cells_shared
        prompts = [list(range(10, 210)), list(range(300, 500)), list(range(600, 800))]  # 600 tokens in all
        seqs = [separate.new_sequence() for _ in prompts]
        together = separate.extend_many(list(zip(seqs, prompts, strict=True)), last_only=True)
        for p, logits in zip(prompts, together, strict=True):
            seq = unified.new_sequence()
            alone = unified.extend(seq, p, last_only=True)
            assert int(np.argmax(logits[-1])) == int(np.argmax(alone[-1]))
            np.testing.assert_allclose(logits[-1], alone[-1], atol=0.5)
            unified.release(seq)
        with pytest.raises(ModelError, match="unified"):
            separate.extend(seqs[0], [1, 2], parents=[-1, -1])
    finally:
        separate.close()
        unified.close()


def test_a_prompt_chunk_beside_other_sequences_tokens_reads_as_it_does_alone(smollm_path: Path) -> None:
    """With a cache per sequence, a server's step feeds one request's prompt chunk beside
    the running requests' single tokens. The chunk's logits are those of the same chunk
    read alone, bit for bit, whether it continues a copied prefix or not: a request's
    answer does not depend on what else was running (llama.cpp's equal split once ran the
    chunk's first row with the others' tokens, and moved them by up to 0.44)."""
    model = llamacpp.LlamaCppModel(smollm_path, n_ctx=512, n_seq_max=4, kv_unified=False)
    try:
        from coinfer.bench.serve_load import load_prompts

        shared, other = (model.chat_prompt([{"role": "user", "content": p}]) for p in load_prompts(16)[14:])
        common = 0
        while shared[common] == other[common]:
            common += 1
        alone = model.new_sequence()
        expected = model.extend(alone, other, last_only=True)[-1]
        model.release(alone)
        running = model.new_sequence()
        model.extend(running, shared)
        fresh = model.new_sequence()
        got = model.extend_many([(running, [5]), (fresh, other)], last_only=True)
        assert np.array_equal(got[1][-1], expected)
        model.release(fresh)
        copy = model.fork(running)
        model.truncate(copy, common)  # continues the prefix the two prompts share
        got = model.extend_many([(running, [7]), (copy, other[common:])], last_only=True)
        assert np.array_equal(got[1][-1], expected)
        model.release(copy)
        model.release(running)
    finally:
        model.close()


def test_a_parked_or_packed_cache_moves_and_goes_on_as_before(smollm_path: Path) -> None:
    """With a cache per sequence a finished conversation's kept cache moves to the highest
    free stream (``park``), so the next conversation takes the stream it held and the live
    ones stay consecutive: one pass for the batch; a running one moves down into a gap
    (``packed``). A cache moves whole: it goes on to the same logits, bit for bit."""
    model = llamacpp.LlamaCppModel(smollm_path, n_ctx=256, n_seq_max=4, kv_unified=False)
    try:
        a, b, c = (model.new_sequence() for _ in range(3))
        for seq, start in ((a, 10), (b, 300), (c, 600)):
            model.extend(seq, list(range(start, start + 40)))
        c_state = model.save_state(c)
        assert c_state is not None
        expected = model.extend(a, [77])
        model.truncate(a, 40)
        moved = model.park(a)
        assert moved is not a and moved.llama_id == 3 and moved.tokens == list(range(10, 50))
        assert np.array_equal(model.extend(moved, [77]), expected)
        new = model.new_sequence()  # takes the stream the parked cache left
        assert new.llama_id == 0 and model.pass_rows([(new, 1), (b, 1), (c, 1)]) == [3]
        assert model.park(c) is c  # no free stream above its own: it stays
        assert model.live_sequences == 4
        model.release(b)  # a gap at stream 1: c comes down into it, b's old stream
        packed = model.packed([new, c])
        assert packed[0] is new and packed[1].llama_id == 1
        assert model.pass_rows([(s, 1) for s in packed]) == [2]
        assert np.array_equal(model.extend(packed[1], [77]), model.extend(model.restore(c_state), [77]))
    finally:
        model.close()


def test_a_copy_moved_before_any_forward_holds_the_copied_cache(smollm_path: Path) -> None:
    """With a cache per sequence a server copies a running request's prefix (``fork``) and
    may move the copy (``packed``) within the same step, before any forward. The copy must
    hold the cells then, not at the next forward (llama.cpp's ``memory_seq_cp`` across
    streams copies then): moved, it goes on to the source's logits, bit for bit. Before, a
    request so copied in the 64-client churn test read a stale cache and wrote another answer."""
    model = llamacpp.LlamaCppModel(smollm_path, n_ctx=256, n_seq_max=4, kv_unified=False)
    try:
        a, b, c = (model.new_sequence() for _ in range(3))
        model.extend(a, list(range(10, 50)))
        copy = model.fork(a)
        assert copy.llama_id == 3
        model.release(b)  # a gap at stream 1: the copy moves down into it
        moved = model.pack(copy)
        assert moved is not copy and moved.llama_id == 1 and moved.tokens == list(range(10, 50))
        expected = model.extend(a, [77])
        assert np.array_equal(model.extend(moved, [77]), expected)
        model.release(c)
    finally:
        model.close()


def test_a_prompt_continued_from_its_cached_prefix_reads_as_the_whole_prompt_on_k_quants(
    smollm_path: Path,
) -> None:
    """The same request sent twice gets the same answer: the second continues the first's
    cached prompt (at least ``min_tail`` rows, from a multiple of ``prefix_block``)
    and its last logits are the whole read's, bit for bit. On a K-quant model the rows take
    the tiled kernel only from its threshold (16 in coinfer's processes); a tail of 8 to 15
    rows ran on others and moved the logits, and greedy answers departed at near ties.
    SmolLM2's Q4_1 weights never take that kernel, and keep the tail of 8."""
    from coinfer.models import load_model

    model = load_model("qwen2.5-coder-0.5b", backend="llama.cpp", n_ctx=1024, n_seq_max=2, kv_unified=False)
    try:
        assert model.min_tail == max(8, llamacpp_tiled.tiled_min_rows()) == 16
        prompt = model.chat_prompt([{"role": "user", "content": "Explain Python's GIL. " * 12}])
        prompt = prompt[: len(prompt) - len(prompt) % 4]  # so that a tail of 8 rows is aligned too
        whole = model.new_sequence()
        expected = model.extend(whole, prompt, last_only=True)[-1]
        for tail in (model.min_tail, model.min_tail + model.prefix_block):  # a repeat resumes so
            again = model.fork(whole)
            model.truncate(again, len(prompt) - tail)
            assert np.array_equal(model.extend(again, prompt[-tail:], last_only=True)[-1], expected)
            model.release(again)
        model.release(whole)
    finally:
        model.close()
    smol = llamacpp.LlamaCppModel(smollm_path, n_ctx=256, n_seq_max=1)
    assert smol.min_tail == 8
    smol.close()
