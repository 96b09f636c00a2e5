"""What ``veil bench tpch|tpcds`` records per query and run, and how it reports it: the
summary in the JSON, the terminal table and the PNG.

A query whose plaintext run timed out has no measured ratio, only a bound: plaintext took
at least the deadline, so Veil's ratio is at most ``ratio_at_most``. The summary's median
and geometric mean take such a bound in the ratio's place, which keeps them upper bounds
of the true figures (both grow with each value) instead of dropping one of Veil's best
queries; ``ratio_bounds`` names those queries, and the table and plot mark them with ≤.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from veil_dev.bench.report import bar_plot, human
from veil_dev.bench.suite import QueryName, Suite


@dataclass
class QueryFigures:
    query: QueryName
    status: str = "ok"  # ok | timeout (side) | memory (Veil) | error (side): ...
    correct: bool | None = None
    fallback: str | None = None  # why Veil's plan fetched whole tables, when it did
    plain_seconds: float | None = None
    # plaintext ran past the deadline: its time is at least this, Veil's ratio at most
    # ``ratio_at_most`` (``ratio`` stays None: no median and no ratio were measured)
    plain_seconds_at_least: float | None = None
    veil_seconds: float | None = None
    server_seconds: float | None = None
    client_seconds: float | None = None
    decrypt_seconds: float | None = None  # parts of client_seconds
    local_seconds: float | None = None
    bytes_received: int | None = None
    plain_result_bytes: int | None = None
    statements: int | None = None
    peak_client_bytes: int | None = None  # Veil's client process, highest of the runs
    plain_link_seconds: float | None = None
    veil_link_seconds: float | None = None
    ratio: float | None = None
    link_ratio: float | None = None
    ratio_at_most: float | None = None
    link_ratio_at_most: float | None = None
    problem: str | None = None


@dataclass
class Bench:
    suite: Suite
    backend: str
    scale_factor: float
    runs: int
    bandwidth_mbit: float
    timeout: float
    memory_cap: int = 6 * 2**30
    link: str | None = None  # a real link's preset (``--link``): no link time is computed
    figures: list[QueryFigures] = field(default_factory=list)

    @property
    def bytes_per_second(self) -> float:
        return self.bandwidth_mbit * 1e6 / 8


def ratio_of(f: QueryFigures, key: str = "ratio") -> float | None:
    """The query's ratio (``ratio`` or ``link_ratio``), else its upper bound, else None."""
    value = getattr(f, key)
    return value if value is not None else getattr(f, f"{key}_at_most")


def summarise(bench: Bench) -> dict[str, Any]:
    figures = bench.figures
    summary: dict[str, Any] = {
        "queries": len(figures),
        "measured": sum(1 for f in figures if ratio_of(f) is not None),
        "correct": sum(1 for f in figures if f.correct),
        "wrong": [f.query for f in figures if f.correct is False],
        "fallbacks": [f.query for f in figures if f.fallback],
        "undocumented_fallbacks": [
            f.query for f in figures if f.fallback and "(documented)" not in f.fallback
        ],
        "timeouts": [f.query for f in figures if f.status.startswith("timeout (Veil")],
        "plaintext_timeouts": [f.query for f in figures if f.plain_seconds_at_least is not None],
        "ratio_bounds": [f.query for f in figures if f.ratio_at_most is not None],
        "memory": [f.query for f in figures if f.status.startswith("memory")],
        "errors": [f.query for f in figures if f.status.startswith("error")],
    }
    peaks = [f.peak_client_bytes for f in figures if f.peak_client_bytes]
    if peaks:
        worst = max(figures, key=lambda f: f.peak_client_bytes or 0)
        summary["peak_client_bytes"] = {"query": worst.query, "value": max(peaks)}
        summary["peak_client_mib"] = max(peaks) / 2**20
    for key in ("ratio", "link_ratio"):
        summary.update(_ratio_summary(figures, key))
    return summary


def _ratio_summary(figures: list[QueryFigures], key: str) -> dict[str, Any]:
    """Median, geometric mean, worst and count over 5x of one ratio (bounds included)."""
    found = [(f, value) for f in figures if (value := ratio_of(f, key)) is not None]
    if not found:
        return {}
    values = [value for _, value in found]
    worst, highest = max(found, key=lambda pair: pair[1])
    return {
        f"median_{key}": statistics.median(values),
        f"geomean_{key}": statistics.geometric_mean(values),
        f"worst_{key}": {"query": worst.query, "value": highest},
        f"over_5x_{key}": sum(1 for v in values if v > 5),
    }


def table_rows(bench: Bench) -> tuple[list[str], list[list[object]]]:
    mbit = f"{bench.bandwidth_mbit:g} Mbit/s"
    headers = ["query", "plain s", "Veil s", "ratio", "server s", "client s", "bytes", "peak MB"]
    headers += [] if bench.link else [f"Veil @{mbit} s", f"ratio @{mbit}"]
    headers += ["correct"]
    rows: list[list[object]] = []
    for f in bench.figures:
        label = bench.suite.label(f.query)
        if ratio_of(f) is None:
            failed: list[object] = [label, f.plain_seconds, None, f.status[:40]]
            rows.append(failed + [None] * (len(headers) - 4))
            continue
        verdict = "yes" if f.correct else f"NO: {f.problem}"[:40]
        verdict += " (fallback)" if f.fallback else ""
        times = [_plain_cell(f), f.veil_seconds, _ratio_cell(f, "ratio")]
        times += [f.server_seconds, f.client_seconds]
        sizes = [float(f.bytes_received or 0), (f.peak_client_bytes or 0) / 2**20]
        link = [] if bench.link else [f.veil_link_seconds, _ratio_cell(f, "link_ratio")]
        rows.append([label, *times, *sizes, *link, verdict])
    return headers, rows


def _plain_cell(f: QueryFigures) -> object:
    if f.plain_seconds_at_least is not None:
        return f"> {f.plain_seconds_at_least:g}"
    return f.plain_seconds


def _ratio_cell(f: QueryFigures, key: str) -> object:
    bound = getattr(f, f"{key}_at_most")
    return f"≤ {human(bound)}" if bound is not None else getattr(f, key)


def summary_line(
    summary: dict[str, Any], space: dict[str, Any], label: Callable[[QueryName], str] = str
) -> str:
    parts = [f"{summary['correct']}/{summary['queries']} correct"]
    for key, name in (("ratio", "ratio"), ("link_ratio", "computed link ratio")):
        if f"median_{key}" in summary:
            worst = summary[f"worst_{key}"]
            parts.append(
                f"{name} median {summary[f'median_{key}']:.2f}, "
                f"worst {worst['value']:.2f} ({label(worst['query'])})"
            )
    keys = ("wrong", "fallbacks", "timeouts", "plaintext_timeouts", "memory", "errors")
    for key in keys:
        if summary.get(key):
            parts.append(f"{key} {[label(q) for q in summary[key]]}")
    if summary.get("ratio_bounds"):
        parts.append("medians are upper bounds (a plaintext timeout's ratio is its bound)")
    parts.append(f"server space x{space['overhead']:.2f}")
    return "; ".join(parts)


def plot(path: str, bench: Bench) -> None:
    labels = [
        bench.suite.label(f.query) + (" (≤)" if f.ratio_at_most is not None else "")
        for f in bench.figures
    ]
    local = "over the link" if bench.link else "local"
    series: dict[str, Sequence[float | None]] = {local: [ratio_of(f) for f in bench.figures]}
    if not bench.link:
        series[f"{bench.bandwidth_mbit:g} Mbit/s link"] = [
            ratio_of(f, "link_ratio") for f in bench.figures
        ]
    where = f", {bench.link} link" if bench.link else ""
    bar_plot(
        path,
        labels,
        series,
        title=f"{bench.suite.title} SF {bench.scale_factor:g} on {bench.backend}{where}: "
        "Veil time / plaintext time",
        ylabel="ratio (log; ≤: plaintext timed out, an upper bound)",
    )
