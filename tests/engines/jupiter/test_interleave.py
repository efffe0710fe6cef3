"""Several requests in the pipeline at once, over real device processes: each request's
tokens are the ones it gets alone, requests join and leave between steps, a request
waits for a free slot, and the devices serve the next request after the run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import HAS_TORCH
from tests.engines.jupiter.conftest import TOKEN, run_on_devices

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")

PROMPTS = {
    10: [5, 17, 33, 8, 90, 41, 7, 7, 64, 12, 3, 99, 21, 40],
    11: [40, 21, 99, 3, 12, 64, 7],
    12: [8, 90, 41, 7, 7, 64, 12, 3, 99],
    13: [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13],
    14: [9, 9, 9, 9],
}
BUDGETS = {10: 9, 11: 6, 12: 12, 13: 7, 14: 5}


class _Script:
    """Arrivals that a test writes down: who joins and who leaves at which poll, and who
    leaves at the next (``leaving``, which the test fills as it reads)."""

    def __init__(self, joins: dict[int, list[int]], leaves: dict[int, set[int]] | None = None) -> None:
        self.joins, self.leaves, self.polls, self.leaving = joins, leaves or {}, 0, set[int]()

    def left(self) -> set[int]:
        self.polls += 1
        gone, self.leaving = self.leaving | self.leaves.get(self.polls, set()), set()
        return gone

    def joined(self) -> list[tuple[int, list[int], int]]:
        return [(k, PROMPTS[k], BUDGETS[k]) for k in self.joins.get(self.polls, [])]


def _interleaved(master: str, world: int, path: str, out: Any) -> None:
    from coinfer.engines.jupiter import EdgeCluster, JupiterConfig, generate
    from coinfer.engines.jupiter.session import ENGINE

    cluster = EdgeCluster(path, world=world, master=master, threads=1, token=TOKEN)
    config = JupiterConfig(max_tokens=16, min_part=4, max_batch=2)
    alone = {k: generate(cluster, p, config=JupiterConfig(max_tokens=BUDGETS[k], min_part=4)).tokens
             for k, p in PROMPTS.items()}  # fmt: skip
    session = ENGINE.open({"cluster": cluster}, config)
    # 10 and 11 fill both slots at once; 12, 13 and 14 join later and wait for a slot;
    # 13 leaves once it has two tokens, 14 before it has a slot
    script = _Script({1: [10, 11], 3: [12], 4: [13], 5: [14]}, {6: {14}})
    got: dict[int, list[int]] = {}
    finishes: dict[int, str | None] = {}
    for r in session.run(script, config.sampling):
        got.setdefault(r.request, []).extend(r.tokens)
        finishes[r.request] = r.finish_reason
        if r.request == 13 and len(got[13]) == 2:
            script.leaving.add(13)
    again = JupiterConfig(max_tokens=BUDGETS[10], min_part=4)
    after = generate(cluster, PROMPTS[10], config=again).tokens
    out.put((session.batching, alone, got, finishes, after))
    cluster.close()


@pytest.mark.parametrize("world", [2, 1])
def test_requests_in_the_pipeline_at_once_get_what_each_gets_alone(tiny_dirs, world: int) -> None:  # type: ignore[no-untyped-def]
    batching, alone, got, finishes, after = run_on_devices(_interleaved, world, str(tiny_dirs["qwen2"]))
    assert batching
    for k in (10, 11, 12):
        assert got[k] == [t for t in alone[k]], k
        assert finishes[k] in ("stop", "length")
    # 13 left after two tokens: the start of its answer alone, then its end says so
    assert got[13] == alone[13][:2]
    assert finishes[13] == "cancelled"
    assert got[14] == [] and finishes[14] == "cancelled"
    assert after == alone[10]


def test_a_bad_number_of_slots_is_refused() -> None:
    from coinfer.engines.jupiter import JupiterConfig
    from coinfer.engines.jupiter.interleave import drive_interleaved
    from coinfer.errors import ConfigError

    with pytest.raises(ConfigError, match="at once"):
        next(drive_interleaved(None, 1, _Script({}), slots=0, parts_of=lambda n: [n], eos=()))
    with pytest.raises(ConfigError, match="max_batch"):
        JupiterConfig(max_batch=0)
