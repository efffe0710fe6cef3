"""``results.md`` of ``coinfer bench collective``: every configuration's throughput, its
decode rate per category against plain decoding's, and the priced ratios."""

from __future__ import annotations

from typing import Any

from coinfer.bench.workloads import CATEGORIES

__all__ = ["markdown"]


def markdown(report: dict[str, Any]) -> str:
    """Per batch size, every configuration's throughput (prefill included and apart) and
    its decode rate per category against plain decoding's."""
    rows = report["rows"]
    cats = [c for c in CATEGORIES if any(c in (r.get("by_category") or {}) for r in rows)]
    cats += [c for r in rows for c in (r.get("by_category") or {}) if c not in cats]
    cats = list(dict.fromkeys(cats))
    per_cat = (report.get("summary") or {}).get("per_category", {})
    alone = (report.get("config") or {}).get("category_workloads")
    repeats = int((report.get("config") or {}).get("repeats") or 1)
    lines = [
        "# coinfer bench collective",
        "",
        "tok/s: output over wall time; decode tok/s: without the prefills (prefill s). "
        "Per category: decode rate against plain decoding's at the same batch size"
        + (", each category's prompts run as a workload of their own" if alone else "")
        + ("; with repeats, the median of each repeat's ratio." if alone and repeats > 1 else "."),
        "",
        "| batch | config | tok/s | decode tok/s | prefill s | s per token | "
        + " | ".join(cats)
        + (" | " if cats else "")
        + "identical to plain | acceptance (voted) | pipelined rounds |",
        "|---|---|---|---|---|---|" + "---|" * len(cats) + "---|---|---|",
    ]
    for r in rows:
        voted = r["acceptance"].get("voted")
        same = "–" if r["identical"] is None else r["identical"]
        mine = per_cat.get(str(r["batch"]), {}).get(r["config"], {})
        cells = "".join(f"{mine[c]:.2f}x | " if c in mine else "– | " for c in cats)
        piped = r.get("pipelined_rounds")
        lines.append(
            f"| {r['batch']} | {r['config']} | {r['tokens_per_s']} | {r.get('decode_tokens_per_s', '–')} "
            f"| {r.get('prefill_s', '–')} | {r['normalized_latency_s']} | {cells}{same} "
            f"| {'–' if voted is None else f'{voted:.0%}'} | {'–' if piped is None else piped} |"
        )
    return "\n".join(lines + _priced_lines(report, cats)) + "\n"


def _priced_lines(report: dict[str, Any], cats: list[str]) -> list[str]:
    """The priced ratios' medians (``bench.collective_priced``), where the runs were
    priced, and the output-matched ones, where the runs recorded their requests' lengths;
    where each category was priced by its near table, the end-of-run table's too."""
    figures = [(b, f) for b, f in ((report.get("summary") or {}).get("priced") or {}).items() if f]
    near = any("forward_ms_near" in f for _, f in figures)
    table = (
        "each category's forwards at a table of the target's forward times timed right after that "
        "category ran"
        if near
        else "each run's forwards at one table of the target's forward times"
    )
    lines = _table(
        {b: f["median"] for b, f in figures},
        cats,
        f"Priced: {table}, against plain decoding's (the median over repeats; drafting and "
        "bookkeeping left out).",
    )
    lines += _table(
        {b: f["matched_median"] for b, f in figures if f.get("matched_median")},
        cats,
        "Priced, outputs matched: how many times less each run's forwards cost than plain "
        "decoding's would for the same outputs, against that of plain decoding's own run "
        "(output lengths, which batch shape moves, left out).",
    )
    lines += _table(
        {b: f["end_table"]["median"] for b, f in figures if "end_table" in f},
        cats,
        "Priced at the end-of-run table: every category's forwards at one table timed after every run.",
    )
    return lines + _table(
        {b: f["in_situ"]["median"] for b, f in figures if "in_situ" in f},
        cats,
        "Priced in situ: each category's forwards at the mean time of each shape's forwards as every "
        "configuration's runs of it took them (pooled).",
    )


def _table(by_batch: dict[str, dict[str, dict[str, float]]], cats: list[str], caption: str) -> list[str]:
    if not by_batch:
        return []
    lines = ["", caption, "", "| batch | config | overall | " + " | ".join(cats) + " |"]
    lines.append("|---|---|---|" + "---|" * len(cats))
    for batch, by_config in by_batch.items():
        for name, mine in by_config.items():
            cells = " | ".join(f"{mine[c]:.3f}x" if c in mine else "–" for c in ["all", *cats])
            lines.append(f"| {batch} | {name} | {cells} |")
    return lines
