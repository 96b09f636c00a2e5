"""``veil leakage``: the report in words and as a PNG (the data: ``veil.session.leakage``)."""

from __future__ import annotations

from veil.design.model import HOM
from veil.session.leakage import CLASSES, Leakage, words


def render_text(report: Leakage) -> str:
    lines = []
    for c in report.columns:
        extra = f"; joins with {', '.join(c.join_class)}" if c.join_class else ""
        summed = "; summed blind (HOM)" if c.summed else ""
        lines.append(
            f"{c.table}.{c.column}: reveals {words(c.reveals)} [{', '.join(c.layers)}; "
            f"policy {c.policy}]{extra}{summed}"
        )
        for event in c.peels:
            query = event.get("query") or "(repaired after an interrupted peel)"
            lines.append(f"    peeled to {event.get('layer')} at {event.get('time')} by: {query}")
    totals = report.totals()
    lines.append("")
    lines.append(
        f"{len(report.columns)} columns: "
        + ", ".join(f"{totals[c]:.1f}% {c}" for c in CLASSES)
        + f"; {totals[HOM]:.1f}% summable blind (HOM)"
    )
    return "\n".join(lines)


def write_png(report: Leakage, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    totals = report.totals()
    names = [*CLASSES, HOM]
    figure, axes = plt.subplots(figsize=(5, 3))
    axes.bar(names, [totals[n] for n in names], color=["#4c72b0", "#dd8452", "#c44e52", "#55a868"])
    axes.set_ylabel("% of columns")
    axes.set_title(f"What the server can learn ({len(report.columns)} columns)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
