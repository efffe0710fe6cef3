"""The plots of ``coinfer bench llmcad``: per-token latency by system under the budget,
and LLMCad's speedup over the target alone against the budget fraction. Written only
when matplotlib is installed (the ``bench`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coinfer.bench.report import pyplot

__all__ = ["plot_all"]


def plot_all(out: Path, report: dict[str, Any]) -> list[Path]:
    """Write ``latency.png`` and (with several budgets) ``budget.png``; the paths written."""
    plt = pyplot()
    if plt is None:
        return []
    written = []
    s = report["summary"]
    names = [n for n, v in s["latency_s"].items() if v is not None]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(names, [s["latency_s"][n] for n in names], color=["C1" if n == "llmcad" else "C0" for n in names])
    ax.set_ylabel("seconds per token")
    ax.set_title(f"under a {s['budget_mib']} MiB budget")
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=120)
    plt.close(fig)
    written.append(out / "latency.png")
    points = sorted((float(f), v) for f, v in s["speedup_by_fraction"].items() if v)
    if len(points) > 1:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot([f for f, _ in points], [v for _, v in points], marker="o")
        ax.set_xlabel("budget: draft + this fraction of the target's weights")
        ax.set_ylabel("speedup over the target alone")
        fig.tight_layout()
        fig.savefig(out / "budget.png", dpi=120)
        plt.close(fig)
        written.append(out / "budget.png")
    return written
