from coinfer.bench.collective import CollectiveBenchConfig, summarize
from coinfer.bench.collective_priced import priced_rates, priced_ratios, sizes_seen

PRICES = {"4": 100.0, "8": 250.0}  # ms of a forward over 4 and over 8 tokens


Forwards = list[dict[str, float]]  # per run, forwards by size


def _row(name: str, tokens: int, sizes: Forwards, edit: Forwards) -> dict[str, object]:
    """A row of ``len(sizes)`` runs: ``tokens`` decoded in each, ``sizes`` its forwards
    overall, ``edit`` the edit category's (which decoded half the tokens)."""
    runs = len(sizes)
    return {"config": name, "batch": 4, "tokens_per_s": 1.0, "acceptance": {},
            "decode_tokens_runs": [tokens] * runs, "forward_sizes_runs": sizes,
            "by_category_runs": {"edit": [[tokens // 2, 9.9]] * runs},
            "forwards_by_category_runs": {"edit": edit}}  # fmt: skip


def test_the_same_forwards_price_the_same_whatever_the_clock_said() -> None:
    plain = _row("plain", 40, [{"4": 10}], [{"4": 5}])
    # the engine: as many tokens in 6 forwards over 4 tokens and 2 over 8 (drafts), 1100 ms
    mine = _row("+majority", 40, [{"4": 6, "8": 2}], [{"4": 1, "8": 2}])
    assert priced_rates(plain, PRICES) == {"all": [40.0], "edit": [40.0]}
    ratios = priced_ratios(mine, plain, PRICES)
    assert ratios == {"all": [0.909], "edit": [0.833]}  # 1000/1100 and 500/600
    assert sizes_seen([plain, mine]) == ["4", "8"]


def test_forwards_recorded_by_shape_are_priced_by_shape() -> None:
    """A forward's price depends on its rows as well as its tokens (each row attends over
    its own context): a row whose runs recorded shapes is priced by them."""
    prices = {"4": 100.0, "4x4": 140.0, "4x8": 300.0, "1x5": 120.0}
    plain = {**_row("plain", 40, [{"4": 10}], [{"4": 5}]), "forward_shapes_runs": [{"4x4": 10}],
             "shapes_by_category_runs": {"edit": [{"4x4": 5}]}}  # fmt: skip
    mine = {**_row("+majority", 40, [{"4": 6, "8": 2}], [{"4": 1, "8": 2}]),
            "forward_shapes_runs": [{"4x4": 5, "1x5": 1, "4x8": 2}],
            "shapes_by_category_runs": {"edit": [{"4x4": 1, "4x8": 2}]}}  # fmt: skip
    assert priced_rates(plain, prices) == {"all": [40 / 1.4], "edit": [20 / 0.7]}
    ratios = {"all": [round(1400 / 1420, 3)], "edit": [round(700 / 740, 3)]}
    assert priced_ratios(mine, plain, prices) == ratios
    assert sizes_seen([mine, plain]) == ["1x5", "4x4", "4x8"]


def test_a_forward_size_with_no_price_gives_no_rate() -> None:
    mine = _row("+majority", 40, [{"4": 6, "12": 1}], [{"12": 1}])
    assert priced_rates(mine, PRICES) == {}


def test_the_summary_holds_each_repeats_priced_ratio_and_their_median() -> None:
    plain = _row("plain", 40, [{"4": 10}] * 3, [{"4": 5}] * 3)
    mine = _row("+pipeline", 40, [{"4": 10}, {"4": 6, "8": 2}, {"4": 8}], [{"4": 5}, {"4": 4}, {"8": 2}])
    config = CollectiveBenchConfig(out="x", batch_sizes=(4,), sweep=False)
    priced = summarize([plain, mine], config, {"4": PRICES})["priced"]["4"]
    assert priced["ratios"]["+pipeline"] == {"all": [1.0, 0.909, 1.25], "edit": [1.0, 1.25, 1.0]}
    assert priced["median"]["+pipeline"] == {"all": 1.0, "edit": 1.0}
    assert priced["forward_ms"] == PRICES
    assert summarize([plain, mine], config)["priced"] == {"4": {}}  # nothing timed, nothing priced
