"""The benchmark's figures as Veil / plain ratios, a table and a plot, with the paper's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from veil_dev.bench.report import bar_plot, format_table

# Secure Mongo's overheads over plain MongoDB (paper Tables 4.5 and 4.6, median latency).
PAPER = {
    "read": {1_000: 11.4, 10_000: 21.5, 100_000: 53.0},
    "write": {1_000: 123.9, 10_000: 114.0, 100_000: 135.5},
}
GOALS = {"read": 2.0, "write": 3.0, "range ope": 2.0, "range ore": 5.0, "sum": 3.0}


def overheads(result: dict[str, Any]) -> dict[str, float]:
    """Veil's median latency (or 1 / throughput) over plain's, per figure."""
    out: dict[str, float] = {}
    for kind in ("read", "write"):
        pair = result.get("benchmarkdb", result.get("writes", {})).get(kind)
        if pair and pair["veil"]:
            out[f"benchmarkdb {kind}"] = pair["veil"]["p50_us"] / pair["plain"]["p50_us"]
    if "range" in result:
        plain = result["range"]["plain"]["p50_us"]
        out["range ope"] = result["range"]["veil"]["p50_us"] / plain
        if "veil_ore" in result["range"]:
            ranked = result["range"].get("plain_ranked", result["range"]["plain"])["p50_us"]
            out["range ore"] = result["range"]["veil_ore"]["p50_us"] / ranked
    if "ore" in result:  # the ore half of the ranges alone
        ore = result["ore"]
        out["range ore"] = ore["veil_ore"]["p50_us"] / ore["plain_ranked"]["p50_us"]
        out["ore load"] = ore["load_docs_per_s"]["plain"] / ore["load_docs_per_s"]["veil"]
    sums = result.get("sum", result.get("chains", {}))
    for strategy in ("server", "fetch", "paillier", "chain", "chain_revealed"):
        if f"veil_{strategy}" in sums:
            veil_sum = sums[f"veil_{strategy}"]["p50_us"]
            out[f"sum ({strategy})"] = veil_sum / sums["plain"]["p50_us"]
    for strategy in ("server", "fetch", "chain"):
        filtered = sums.get("filtered", {})
        if f"veil_{strategy}" in filtered:
            veil_sum = filtered[f"veil_{strategy}"]["p50_us"]
            out[f"filtered sum ({strategy})"] = veil_sum / filtered["plain"]["p50_us"]
    after = sums.get("after_inc", {})
    if after:
        out["sum after $inc (chain_revealed)"] = (
            after["veil_chain_revealed"]["p50_us"] / after["plain"]["p50_us"]
        )
    incs = sums.get("inc", result.get("inc", {}))
    for name, figure in incs.items():
        if name != "plain":
            out[f"$inc ({name})"] = figure["p50_us"] / incs["plain"]["p50_us"]
    if "ycsb" not in result:  # not run, or a run stopped before its last section
        return out
    ycsb = result["ycsb"]
    load = ycsb["load_docs_per_s"]
    out["ycsb load"] = load["plain"] / load["veil"]
    for label, pair in ycsb.items():
        if label != "load_docs_per_s" and pair["veil"]["ops_per_s"]:
            out[f"ycsb {label}"] = pair["plain"]["ops_per_s"] / pair["veil"]["ops_per_s"]
        for kind in ("read", "update"):  # per kind: the goals differ (reads 2x, writes 3x)
            if label != "load_docs_per_s" and pair["veil"].get(f"{kind}_p50_us"):
                ratio = pair["veil"][f"{kind}_p50_us"] / pair["plain"][f"{kind}_p50_us"]
                out[f"ycsb {label} {kind} p50"] = ratio
    return out


def table(result: dict[str, Any]) -> str:
    rows = []
    paper_read = PAPER["read"].get(result["docs"])
    paper_write = PAPER["write"].get(result["docs"])
    for name, ratio in result["overheads"].items():
        paper = (
            paper_read if name.endswith("read") else paper_write if name.endswith("write") else None
        )
        rows.append([name, ratio, paper])
    return format_table(["figure (Veil / plain)", "Veil", "paper"], rows)


def plot(path: str | Path, result: dict[str, Any]) -> None:
    labels = list(result["overheads"])
    paper = [
        PAPER["read"].get(result["docs"]) if n.endswith("read")
        else PAPER["write"].get(result["docs"]) if n.endswith("write") else None
        for n in labels
    ]  # fmt: skip
    bar_plot(
        path, labels, {"Veil": list(result["overheads"].values()), "Secure Mongo (paper)": paper},
        title=f"Overhead over plain pymongo, {result['docs']:,} documents (FerretDB)",
        ylabel="Veil / plain (median latency or 1/throughput)",
    )  # fmt: skip
