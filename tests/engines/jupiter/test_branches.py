"""Outline decoding's branches on real devices (paper 004 §V-B): several branches share the
prompt's cache and go through the pipeline together, and each writes exactly what plain
decoding writes for the prompt followed by that branch's request, greedy, with and
without the heads' trees, on one, two and three devices (and on two with static caches,
the GPU path's)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import HAS_TORCH
from tests.engines.jupiter.conftest import PROMPT, cluster_with_heads, run_on_devices

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")

FEEDS = [[3, 99], [21, 40, 50, 60, 61], [77], [8, 9, 10]]
N = 14
QUESTION = "List three ways to stay healthy."


def _branches(cluster: Any, heads: Any, width: int) -> list[list[int]]:
    """Every feed a branch after PROMPT, decoded together in groups of the device count."""
    from coinfer.decoding.sampling import SamplingParams
    from coinfer.decoding.self_draft import widened_choices
    from coinfer.engines.jupiter.branch_driver import Branch, BranchDriver
    from coinfer.engines.jupiter.branches import BranchVerifier
    from coinfer.engines.jupiter.pipeline import Traffic
    from coinfer.engines.jupiter.tree_pipeline import prefill_answer

    traffic, sampling = Traffic(), SamplingParams()
    cluster.begin({}, tree_width=width if heads else 0, branches=True)
    verifier = BranchVerifier(sampling, heads, max(width, 1)) if cluster.world == 1 else None
    k = heads.k if heads else 0
    choices = widened_choices(k, width) if heads else ()
    driver = BranchDriver(cluster.stage, cluster.world, traffic, eos=(), heads=k, width=max(width, 1),
                          choices=choices, verifier=verifier)  # fmt: skip
    prefill_answer(
        cluster.stage, cluster.world, PROMPT, [6, len(PROMPT) - 6], verifier, traffic, 2 + k * max(width, 1)
    )
    driver.hold(len(PROMPT))
    branches = [Branch(b, len(PROMPT), list(feed), N) for b, feed in enumerate(FEEDS)]
    groups = [branches[g :: cluster.world] for g in range(cluster.world)]
    rounds = list(driver.decode(groups))
    driver.close()
    cluster.finish(traffic)
    assert sum(len(r.tokens) for r in rounds) == N * len(FEEDS)
    return [b.produced for b in branches]


def _requests(master: str, world: int, path: str, heads_dir: str, kv: str, out) -> None:  # type: ignore[no-untyped-def]
    from coinfer.engines.jupiter import JupiterConfig, generate

    with cluster_with_heads(path, heads_dir, world, master, kv) as cluster:
        naive = [generate(cluster, PROMPT + f, config=JupiterConfig(max_tokens=N)).tokens for f in FEEDS]
        plain = _branches(cluster, None, 1)
        drafted = _branches(cluster, cluster.heads, 2)
        asked = generate(cluster, QUESTION, config=JupiterConfig(max_tokens=24, decode="outline"))
        direct = generate(cluster, QUESTION, config=JupiterConfig(max_tokens=24))
        counted = asked.stats.n_tokens == len(asked.tokens) and asked.extras["decoded_tokens"] >= len(
            asked.tokens
        )
        out.put((naive, plain, drafted, (asked.text, asked.extras["decoded"]), direct.text, counted))


@pytest.mark.parametrize(("world", "kv"), [(1, "dynamic"), (2, "dynamic"), (3, "dynamic"), (2, "static")])
def test_branches_decoded_together_write_what_each_writes_alone(
    model_and_heads: tuple[str, str], world: int, kv: str
) -> None:
    naive, plain, drafted, (asked, decoded), direct, counted = run_on_devices(
        _requests, world, *model_and_heads, kv
    )
    assert plain == naive  # each branch sees the shared prompt and its own tokens only
    assert drafted == naive  # and the heads' trees inside each branch change nothing
    # a random model writes no outline: the question is answered as plain decoding answers it
    assert decoded == "sequential" and asked == direct
    assert counted  # n_tokens counts what was output; the outline's tokens are in decoded_tokens


def test_a_branch_message_is_read_back_and_a_malformed_one_is_refused() -> None:
    from coinfer.engines.jupiter.branches import BranchCall, Piece, read_branch_meta
    from coinfer.errors import TransportError
    from coinfer.models.tree import TokenTree

    call = BranchCall.of([Piece(0, 10, (5, 6)), Piece(1, 10, (7,), TokenTree.of([8, 9, 4], [-1, 0, -1]))])
    assert call.positions == [10, 11, 10, 11, 12, 11] and call.parents == [-1, 0, -1, 2, 3, 2]
    assert call.pieces == [(0, 1, 0, 11), (1, 2, 3, 10)]
    drops, back = read_branch_meta(call.meta([3, 4], with_tokens=True).tolist(), len(call.tokens))
    assert drops == [3, 4] and back == call
    with pytest.raises(TransportError):
        read_branch_meta(call.meta([], with_tokens=False).tolist()[:-1], len(call.tokens))
