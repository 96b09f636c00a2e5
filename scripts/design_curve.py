"""The space/time curve of ``veil design`` (issue 13): one point per design, from the runs of
``veil bench tpch [--design FILE]`` (their JSON) and ``veil design``'s own output.

    python scripts/design_curve.py OUT.json OUT.png LABEL=BENCH.json[:DESIGN.txt] ...

A label's DESIGN.txt (what ``veil design`` printed) adds the model's space factor, the
estimated cost and the designer's time; the greedy point has none.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any


def point(label: str, bench_path: str, design_path: str | None) -> dict[str, Any]:
    bench = json.loads(Path(bench_path).read_text())
    summary, space = bench["summary"], bench["space"]
    found: dict[str, Any] = {
        "design": label,
        "backend": bench["backend"],
        "server_space_x_plain": space["overhead"],
        "veil_bytes": space["veil_bytes"],
        "plain_bytes": space["plain_bytes"],
        "median_ratio": summary["median_ratio"],
        "worst_ratio": summary["worst_ratio"],
        "median_link_ratio": summary["median_link_ratio"],
        "correct": summary["correct"],
        "queries": summary["queries"],
        "veil_load_seconds": bench["load_seconds"].get("veil_load"),
        "ratios": {f"Q{q['query']}": q["ratio"] for q in bench["queries"]},
    }
    if design_path:
        text = Path(design_path).read_text()
        found["model_space_x_plain"] = float(re.search(r": ([\d.]+) x the plaintext", text)[1])
        found["estimated_ms"] = float(
            re.search(r"estimated workload cost: ([\d,.]+) ms", text)[1].replace(",", "")
        )
        found["designer_seconds"] = float(re.search(r"designer: ([\d.]+) s", text)[1])
        found["ilp_seconds"] = float(re.search(r"ILP ([\d.]+) s", text)[1])
    return found


def plot(points: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backends = sorted({p["backend"] for p in points})
    figure, axes = plt.subplots(1, len(backends), figsize=(7.5 * len(backends), 4.8), squeeze=False)
    for axis, backend in zip(axes[0], backends, strict=True):
        for p in (p for p in points if p["backend"] == backend):
            marker = "s" if p["design"] == "greedy" else "o"
            axis.scatter(p["server_space_x_plain"], p["median_ratio"], marker=marker, s=60)
            worst = p["worst_ratio"]
            axis.annotate(
                f"{p['design']}\nworst x{worst['value']:.0f} (Q{worst['query']})",
                (p["server_space_x_plain"], p["median_ratio"]),
                textcoords="offset points",
                xytext=(8, 4),
                fontsize=8,
            )
        axis.set_xlabel("server bytes / plaintext bytes (measured)")
        axis.set_ylabel("median Veil / plaintext time, 22 queries")
        axis.set_title(f"TPC-H SF 1 on {backend}: ILP designs by budget vs greedy")
        axis.grid(alpha=0.3)
        axis.margins(x=0.3, y=0.15)  # room for the labels
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str]) -> int:
    out_json, out_png, *items = argv
    points = []
    for item in items:
        label, _, paths = item.partition("=")
        bench_path, _, design_path = paths.partition(":")
        points.append(point(label, bench_path, design_path or None))
    Path(out_json).write_text(
        json.dumps({"benchmark": "design_tpch", "points": points}, indent=2) + "\n"
    )
    plot(points, out_png)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
