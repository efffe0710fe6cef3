from types import SimpleNamespace

import pytest

from coinfer.bench.collective import CollectiveBenchConfig, summarize
from coinfer.bench.collective_priced import (
    forward_prices,
    matched_ratios,
    plain_steps_ms,
    priced_rates,
    priced_ratios,
    shapes_to_price,
    situ_prices,
    sizes_seen,
)
from coinfer.errors import ConfigError

PRICES = {"4": 100.0, "8": 250.0}  # ms of a forward over 4 and over 8 tokens


Forwards = list[dict[str, float]]  # per run, forwards by size


def priced_row(name: str, tokens: int, sizes: Forwards, edit: Forwards) -> dict[str, object]:
    """A row of ``len(sizes)`` runs: ``tokens`` decoded in each, ``sizes`` its forwards
    overall, ``edit`` the edit category's (which decoded half the tokens)."""
    runs = len(sizes)
    return {"config": name, "batch": 4, "tokens_per_s": 1.0, "acceptance": {},
            "decode_tokens_runs": [tokens] * runs, "forward_sizes_runs": sizes,
            "by_category_runs": {"edit": [[tokens // 2, 9.9]] * runs},
            "forwards_by_category_runs": {"edit": edit}}  # fmt: skip


def test_the_same_forwards_price_the_same_whatever_the_clock_said() -> None:
    plain = priced_row("plain", 40, [{"4": 10}], [{"4": 5}])
    # the engine: as many tokens in 6 forwards over 4 tokens and 2 over 8 (drafts), 1100 ms
    mine = priced_row("+majority", 40, [{"4": 6, "8": 2}], [{"4": 1, "8": 2}])
    assert priced_rates(plain, PRICES) == {"all": [40.0], "edit": [40.0]}
    ratios = priced_ratios(mine, plain, PRICES)
    assert ratios == {"all": [0.909], "edit": [0.833]}  # 1000/1100 and 500/600
    assert sizes_seen([plain, mine]) == ["4", "8"]


def test_forwards_recorded_by_shape_are_priced_by_shape() -> None:
    """A forward's price depends on its rows as well as its tokens (each row attends over
    its own context): a row whose runs recorded shapes is priced by them."""
    prices = {"4": 100.0, "4x4": 140.0, "4x8": 300.0, "1x5": 120.0}
    plain = {**priced_row("plain", 40, [{"4": 10}], [{"4": 5}]), "forward_shapes_runs": [{"4x4": 10}],
             "shapes_by_category_runs": {"edit": [{"4x4": 5}]}}  # fmt: skip
    mine = {**priced_row("+majority", 40, [{"4": 6, "8": 2}], [{"4": 1, "8": 2}]),
            "forward_shapes_runs": [{"4x4": 5, "1x5": 1, "4x8": 2}],
            "shapes_by_category_runs": {"edit": [{"4x4": 1, "4x8": 2}]}}  # fmt: skip
    assert priced_rates(plain, prices) == {"all": [40 / 1.4], "edit": [20 / 0.7]}
    ratios = {"all": [round(1400 / 1420, 3)], "edit": [round(700 / 740, 3)]}
    assert priced_ratios(mine, plain, prices) == ratios
    assert sizes_seen([mine, plain]) == ["1x5", "4x4", "4x8"]


def test_a_forward_size_with_no_price_gives_no_rate() -> None:
    mine = priced_row("+majority", 40, [{"4": 6, "12": 1}], [{"12": 1}])
    assert priced_rates(mine, PRICES) == {}


def test_the_summary_holds_each_repeats_priced_ratio_and_their_median() -> None:
    plain = priced_row("plain", 40, [{"4": 10}] * 3, [{"4": 5}] * 3)
    runs, edit = [{"4": 10}, {"4": 6, "8": 2}, {"4": 8}], [{"4": 5}, {"4": 4}, {"8": 2}]
    mine = priced_row("+pipeline", 40, runs, edit)
    config = CollectiveBenchConfig(out="x", batch_sizes=(4,), sweep=False)
    priced = summarize([plain, mine], config, {"4": PRICES})["priced"]["4"]
    assert priced["ratios"]["+pipeline"] == {"all": [1.0, 0.909, 1.25], "edit": [1.0, 1.25, 1.0]}
    assert priced["median"]["+pipeline"] == {"all": 1.0, "edit": 1.0}
    assert priced["forward_ms"] == PRICES
    assert summarize([plain, mine], config)["priced"] == {"4": {}}  # nothing timed, nothing priced


def _split_row(name: str, shapes: dict[str, dict[str, float]]) -> dict[str, object]:
    """A batch-8 row of one run whose categories each decoded 80 tokens in ``shapes``."""
    total: dict[str, float] = {}
    for by_shape in shapes.values():
        for key, n in by_shape.items():
            total[key] = total.get(key, 0) + n
    return {"config": name, "batch": 8, "tokens_per_s": 1.0, "acceptance": {},
            "decode_tokens_runs": [80 * len(shapes)], "forward_shapes_runs": [total],
            "by_category_runs": {c: [[80, 9.9]] for c in shapes},
            "shapes_by_category_runs": {c: [s] for c, s in shapes.items()}}  # fmt: skip


def test_each_category_is_priced_by_the_table_timed_near_its_runs() -> None:
    """Plain decoding ran 8 rows whole, the engine split them in two forwards of 4. The
    end-of-run table says 8 rows cost 250 ms, less than two of 4 (262); timed right after
    edit ran, 8 rows cost 310. Each category's forwards, plain's and the engine's alike,
    are priced by the table timed near them, and overall sums the categories so priced."""
    plain = _split_row("plain", {"edit": {"8x8": 10}, "qa": {"8x8": 10}})
    mine = _split_row("+majority", {"edit": {"4x4": 20}, "qa": {"4x4": 20}})
    end = {"4x4": 131.0, "8x8": 250.0}
    near = {"edit": {"4x4": 127.0, "8x8": 310.0}, "qa": {"4x4": 116.0, "8x8": 250.0}}
    config = CollectiveBenchConfig(out="x", batch_sizes=(8,), sweep=False)
    priced = summarize([plain, mine], config, {"8": end}, {"8": near})["priced"]["8"]
    overall = round((3100 + 2500) / (2540 + 2320), 3)
    assert priced["median"]["+majority"] == {
        "edit": round(3100 / 2540, 3),
        "qa": round(2500 / 2320, 3),
        "all": overall,
    }
    assert priced["forward_ms_near"] == near and priced["forward_ms"] == end
    at_end = round(250 / 262, 3)
    assert priced["end_table"]["median"]["+majority"] == {"all": at_end, "edit": at_end, "qa": at_end}
    # a category with no near table: every category at the end-of-run table, none mixed
    partial = summarize([plain, mine], config, {"8": end}, {"8": {"edit": near["edit"]}})["priced"]["8"]
    assert partial["median"]["+majority"] == priced["end_table"]["median"]["+majority"]
    assert "end_table" not in partial and "forward_ms_near" not in partial


def test_in_situ_prices_pool_every_configurations_forwards_of_a_shape() -> None:
    """A shape's in-situ price is the mean of every forward of it that the runs at that
    batch size timed, plain decoding's and each configuration's together (``default``,
    which repeats the first single draft's runs, not twice)."""
    plain = {
        **_split_row("plain", {"qa": {"8x8": 10}}),
        "shape_ms_by_category_runs": {"qa": [{"8x8": 3000.0}]},
    }
    mine = {**_split_row("single:ngram", {"qa": {"8x8": 2, "4x4": 16}}),
            "shape_ms_by_category_runs": {"qa": [{"8x8": 700.0, "4x4": 2400.0}]}}  # fmt: skip
    by = {("plain", 8): plain, ("single:ngram", 8): mine, ("default", 8): {**mine, "config": "default"}}
    assert situ_prices(by, 8, "qa") == {"8x8": round(3700 / 12, 3), "4x4": 150.0}
    config = CollectiveBenchConfig(out="x", batch_sizes=(8,), sweep=False)
    priced = summarize(list(by.values()), config, {"8": {"8x8": 250.0, "4x4": 100.0}})["priced"]["8"]
    eight = round(3700 / 12, 3)
    plain_ms, mine_ms = 10 * eight, 2 * eight + 16 * 150
    assert priced["in_situ"]["median"]["single:ngram"] == {
        "qa": round(plain_ms / mine_ms, 3),
        "all": round(plain_ms / mine_ms, 3),
    }
    assert priced["in_situ"]["forward_ms"] == {"qa": {"8x8": eight, "4x4": 150.0}}


class ClockedTarget:
    """A target whose forward over n tokens takes n ms on a clock of its own, three times
    as long while a slow spell lasts (the forwards numbered ``slow``, the prefill first)."""

    def __init__(self, slow: range) -> None:
        self.now, self.calls, self.slow = 0.0, 0, slow
        self.held: dict[int, int] = {}

    def clock(self) -> float:
        return self.now

    def new_sequence(self) -> int:
        self.held[len(self.held)] = 0
        return len(self.held) - 1

    def extend_many(self, items: list[tuple[int, list[int]]], last_only: bool = False) -> None:
        tokens = sum(len(t) for _, t in items)
        self.now += tokens / 1000 * (3 if self.calls in self.slow else 1)
        self.calls += 1
        for seq, t in items:
            self.held[seq] += len(t)

    def truncate(self, seq: int, n: int) -> None:
        self.held[seq] = n

    def release(self, seq: int) -> None:
        del self.held[seq]


def test_a_slow_spell_does_not_raise_one_shapes_price_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Timed shape after shape, a slow spell of the machine's lands on one shape's every
    repeat (run M's table had 4 rows of 4 tokens at 131 ms beside 4 rows of 5 at 127, so
    two forwards of 4 rows looked dearer than one of 8, and a split that pays looked like a
    loss): in rounds, it lands on every shape's few rounds and the median leaves it out."""
    import coinfer.bench.decode as decode

    target = ClockedTarget(slow=range(4, 10))  # rounds 1 and 2 of three shapes (0: prefill, 1-3: warm)
    monkeypatch.setattr(decode, "time", SimpleNamespace(perf_counter=target.clock))
    prices = forward_prices(target, list(range(30)), ["1x2", "2x4", "4x8"], rounds=5)  # type: ignore[arg-type]
    assert prices == {"1x2": 2.0, "2x4": 4.0, "4x8": 8.0}
    assert target.held == {}  # every sequence released
    with pytest.raises(ConfigError):  # 2 rows cannot share 1 token
        forward_prices(target, list(range(30)), ["2x1"], rounds=1)  # type: ignore[arg-type]
    assert target.held == {}


def _run(name: str, lengths: list[int], shapes: dict[str, float]) -> dict[str, object]:
    """A batch-2 row of one run of one category, qa: its requests' tokens after their
    first (``lengths``), its forwards by shape."""
    tokens = sum(lengths)
    return {"config": name, "batch": 2, "decode_tokens_runs": [tokens], "forward_shapes_runs": [shapes],
            "by_category_runs": {"qa": [[tokens, 9.9]]}, "shapes_by_category_runs": {"qa": [shapes]},
            "lengths_by_category_runs": {"qa": [lengths]}}  # fmt: skip


def test_outputs_matched_a_shorter_output_costs_nothing_that_the_engine_did() -> None:
    """Batch shape moves llama.cpp's logits, so a configuration's output can end sooner
    than plain decoding's; the request left alone then decodes one row per forward, each
    token dearer. Run M's gated-off draft (plain decoding, its outputs 6% shorter) priced
    0.953-0.958 of plain on qa: the output-matched ratio leaves that out, and keeps what
    drafts save."""
    prices = {"1x1": 40.0, "2x2": 50.0, "2x4": 60.0}
    plain = _run("plain", [4, 4], {"2x2": 4})  # 8 tokens in 200 ms
    shorter = _run("single:gated-off", [4, 2], {"2x2": 2, "1x1": 2})  # 6 in 180 ms: plain steps all the same
    drafted = _run("single:drafted", [4, 4], {"2x4": 2})  # two rows of 2 tokens, twice: 120 ms
    assert priced_ratios(shorter, plain, prices) == {"all": [0.833], "qa": [0.833]}
    assert matched_ratios(shorter, plain, prices, batch=2) == {"qa": [1.0], "all": [1.0]}
    assert matched_ratios(drafted, plain, prices, batch=2) == {"qa": [1.667], "all": [1.667]}
    assert plain_steps_ms([4, 2], prices) == 180.0 and plain_steps_ms([3], {"2x2": 1.0}) is None
    # three requests at batch 2 joined as others left: not started together, not matched
    assert matched_ratios(_run("x", [4, 2, 2], {"2x2": 4}), plain, prices, batch=2) == {}
    assert shapes_to_price([plain, drafted], 2) == ["1x1", "2x2", "2x4"]
