"""The plots of ``coinfer bench collective`` (paper 001, Figures 10-12): throughput per
configuration and batch size, the speculation length sweep against the selector, and
acceptance per draft. Written only when matplotlib is installed (the ``bench`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coinfer.bench.report import pyplot

__all__ = ["plot_all"]


def plot_all(out: Path, report: dict[str, Any]) -> list[Path]:
    """Write ``throughput.png``, ``sweep.png`` and ``acceptance.png``; the paths written."""
    plt = pyplot()
    if plt is None:
        return []
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in (("throughput", _throughput), ("sweep", _sweep), ("acceptance", _acceptance)):
        fig, ax = plt.subplots(figsize=(8, 3.8))
        if draw(ax, report):
            fig.tight_layout()
            fig.savefig(out / f"{name}.png", dpi=120)
            written.append(out / f"{name}.png")
        plt.close(fig)
    return written


def _grouped(ax: Any, groups: list[str], series: dict[str, list[float]], ylabel: str) -> None:
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        ax.bar([j + i * width for j in range(len(groups))], values, width, label=label)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(groups))], groups)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", alpha=0.3)


def _throughput(ax: Any, report: dict[str, Any]) -> bool:
    """Figure 10: tokens/s of every configuration at every batch size."""
    rows = [r for r in report["rows"] if not r["config"].startswith("sweep")]
    batches = sorted({r["batch"] for r in rows})
    names = list(dict.fromkeys(r["config"] for r in rows))
    by = {(r["config"], r["batch"]): r["tokens_per_s"] for r in rows}
    series = {n: [by.get((n, b), 0.0) for b in batches] for n in names}
    _grouped(ax, [f"batch {b}" for b in batches], series, "output tokens/s")
    return bool(rows)


def _sweep(ax: Any, report: dict[str, Any]) -> bool:
    """Figure 12: tokens/s at each fixed s, and the selector's."""
    sweep = report.get("summary", {}).get("sweep", {})
    by_s = sweep.get("tokens_per_s_by_s") or {}
    if not by_s:
        return False
    xs = sorted(int(s) for s in by_s)
    ax.plot(xs, [by_s[str(s)] for s in xs], marker="o", label="fixed s")
    if sweep.get("selector"):
        ax.axhline(sweep["selector"], color="C1", linestyle="--", label="selector")
    ax.set_xlabel(f"speculation length s (batch {sweep.get('batch')})")
    ax.set_ylabel("output tokens/s")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return True


def _acceptance(ax: Any, report: dict[str, Any]) -> bool:
    """Figure 11: acceptance of each draft alone and of the voted drafts."""
    acc = report.get("summary", {}).get("acceptance") or {}
    if not acc:
        return False
    batches = sorted(acc, key=int)
    names = list(dict.fromkeys(n for b in batches for n in acc[b]))
    series = {n: [acc[b].get(n) or 0.0 for b in batches] for n in names}
    _grouped(ax, [f"batch {b}" for b in batches], series, "acceptance rate")
    ax.set_ylim(0, 1)
    return True
