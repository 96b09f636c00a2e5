"""Shared parts of benchmarks: median timing, a text table, a JSON file and a PNG plot."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Right-aligned columns (left-aligned first column) for a terminal."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for index, row in enumerate(cells):
        parts = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(parts))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return human(value)
    return "" if value is None else str(value)


def human(value: float) -> str:
    """3 significant digits with a k/M/G suffix: 12.3M, 456k, 7.89."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


def median_seconds(work: Callable[[], Any], runs: int) -> tuple[float, Any]:
    """The median wall time of ``runs`` calls of ``work``, and the last call's result."""
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def write_json(path: str | Path, document: Any) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


def bar_plot(
    path: str | Path,
    labels: Sequence[str],
    series: dict[str, Sequence[float | None]],
    *,
    title: str,
    ylabel: str,
    log: bool = True,
) -> None:
    """Grouped bars, one group per label and one bar per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(labels) + 2), 4.5))
    for offset, (name, values) in enumerate(series.items()):
        xs = [i + offset * width for i in range(len(labels))]
        ax.bar(xs, [v or 0 for v in values], width=width, label=name)
    ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(labels))])
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
