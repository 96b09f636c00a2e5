"""``veil kv packsize``: compression ratio against rows per pack (MiniCrypt Figure 2).

For each compression algorithm the records are cut, in order, into packs of n
consecutive rows; every pack is compressed on its own and the ratio is
raw bytes / compressed bytes over the whole dataset. ``whole`` compresses the
entire dataset as one blob, the upper bound a pack can approach (§3). The
rows needed for 75% and 90% of that bound are interpolated between measured
pack sizes on a log scale, as the paper's table reports fractional sizes.

``recommended`` is what a store would choose for a table created without
``pack_rows`` whose first batch were these records (keyed 0, 1, 2, ...): the
same function, :func:`veil.kv.packsize.choose_pack_rows`, on real packs
(keys, lengths and envelope bytes counted), for the codecs a store offers.
"""

from __future__ import annotations

import itertools
import json
import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import lz4.frame
import zstandard

from veil.kv.keys import encode_key
from veil.kv.packsize import MAX_PACK_BYTES, TARGET_SHARE, choose_blocked, choose_pack_rows

PACK_ROWS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
TARGETS = (0.75, 0.90)

Compressor = Callable[[bytes], bytes]

# Library defaults (zlib 6, zstd 3, lz4 frame 0): what a store would use.
COMPRESSORS: dict[str, Compressor] = {
    "zlib": zlib.compress,
    "zstd": zstandard.ZstdCompressor().compress,
    "lz4": lz4.frame.compress,
}


@dataclass
class AlgorithmCurve:
    """Ratios of one algorithm, keyed by rows per pack; ``whole`` is the entire dataset."""

    ratios: dict[int, float]
    whole: float
    rows_for_target: dict[float, float | None] = field(default_factory=dict)

    def fraction_at(self, rows: int) -> float:
        return self.ratios[rows] / self.whole


def pack_ratio(records: Sequence[bytes], rows: int, compress: Compressor) -> float:
    raw = sum(len(record) for record in records)
    stored = 0
    for start in range(0, len(records), rows):
        stored += len(compress(b"".join(records[start : start + rows])))
    return raw / stored


def rows_for_fraction(ratios: dict[int, float], whole: float, fraction: float) -> float | None:
    """Smallest pack size reaching ``fraction`` of ``whole``, log-interpolated; None if never."""
    goal = fraction * whole
    sizes = sorted(ratios)
    if ratios[sizes[0]] >= goal:
        return float(sizes[0])
    for low, high in itertools.pairwise(sizes):
        if ratios[high] >= goal > ratios[low]:
            share = (goal - ratios[low]) / (ratios[high] - ratios[low])
            return math.exp(math.log(low) + share * (math.log(high) - math.log(low)))
    return None


def measure(
    records: Sequence[bytes],
    algorithms: Sequence[str] = tuple(COMPRESSORS),
    pack_rows: Sequence[int] = PACK_ROWS,
) -> dict[str, AlgorithmCurve]:
    sizes = [rows for rows in pack_rows if rows < len(records)]
    whole_blob = b"".join(records)
    curves = {}
    for name in algorithms:
        compress = COMPRESSORS[name]
        ratios = {rows: pack_ratio(records, rows, compress) for rows in sizes}
        whole = len(whole_blob) / len(compress(whole_blob))
        curve = AlgorithmCurve(ratios, whole)
        curve.rows_for_target = {t: rows_for_fraction(ratios, whole, t) for t in TARGETS}
        curves[name] = curve
    return curves


def recommend(
    records: Sequence[bytes],
    algorithms: Sequence[str] = tuple(COMPRESSORS),
    *,
    target: float = TARGET_SHARE,
    max_pack_bytes: int = MAX_PACK_BYTES,
) -> dict[str, dict[str, object]]:
    """The pack size a store would choose for each codec (its catalogue record)."""
    entries = [(encode_key(i), record) for i, record in enumerate(records)]
    chosen = {
        name: choose_pack_rows(entries, name, target=target, max_pack_bytes=max_pack_bytes).record()
        for name in algorithms
    }
    chosen["zstd-dict"] = _recommend_blocked(entries, target)
    return chosen


def _recommend_blocked(entries: list[tuple[bytes, bytes]], target: float) -> dict[str, object]:
    """What a ``compression="zstd-dict"`` table chooses: its dictionary, then blocks."""
    from veil.kv.dictionary import block_compressor, train, training_samples

    dictionary = train(1, training_samples(entries))
    compressor = dictionary.block_compressor() if dictionary else block_compressor()
    return choose_blocked(entries, compressor.compress, target=target).record()


def report(dataset: str, records: Sequence[bytes], curves: dict[str, AlgorithmCurve]) -> dict:
    raw = sum(len(record) for record in records)
    return {
        "dataset": dataset,
        "records": len(records),
        "raw_bytes": raw,
        "mean_record_bytes": round(raw / len(records), 1),
        "algorithms": {
            name: {
                "ratio_by_rows_per_pack": {str(k): round(v, 4) for k, v in curve.ratios.items()},
                "ratio_whole": round(curve.whole, 4),
                "fraction_of_whole_at_50": round(curve.fraction_at(50), 4)
                if 50 in curve.ratios
                else None,
                "rows_for_75pct": _round(curve.rows_for_target[0.75]),
                "rows_for_90pct": _round(curve.rows_for_target[0.90]),
            }
            for name, curve in curves.items()
        },
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, curve in result["algorithms"].items():
        xs = [int(k) for k in curve["ratio_by_rows_per_pack"]]
        (line,) = ax.plot(
            xs, list(curve["ratio_by_rows_per_pack"].values()), marker="o", label=name
        )
        ax.axhline(curve["ratio_whole"], color=line.get_color(), linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("rows per pack (log scale); dashed: whole dataset")
    ax.set_ylabel("compression ratio")
    mean = result["mean_record_bytes"]
    ax.set_title(f"{result['dataset']}: {result['records']} records, {mean:.0f} B mean")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def summary_lines(result: dict) -> list[str]:
    lines = [
        f"{result['dataset']}: {result['records']} records, {result['raw_bytes']} bytes "
        f"({result['mean_record_bytes']} B per record)",
        "algo   " + " ".join(f"{k:>6}" for k in _sizes(result)) + "   whole  at50/whole  n75   n90",
    ]
    for name, curve in result["algorithms"].items():
        ratios = " ".join(f"{v:6.2f}" for v in curve["ratio_by_rows_per_pack"].values())
        at50 = curve["fraction_of_whole_at_50"]
        lines.append(
            f"{name:<6} {ratios}  {curve['ratio_whole']:6.2f}  "
            f"{'-' if at50 is None else f'{at50:.0%}':>9}  "
            f"{_fmt(curve['rows_for_75pct']):>4}  {_fmt(curve['rows_for_90pct']):>4}"
        )
    for name, choice in result.get("recommended", {}).items():
        verdict = "reaches" if choice["reached_target"] else "short of"
        blocks = f" in blocks of {choice['block_rows']}" if choice.get("block_rows") else ""
        lines.append(
            f"recommended pack_rows ({name}): {choice['pack_rows']}{blocks}, stored ratio "
            f"{choice['ratio']:.2f} {verdict} {choice['target']:.0%} of the whole sample's "
            f"{choice['whole_ratio']:.2f} (reads of at most {choice['max_pack_bytes']} bytes; "
            f"{choice['sample_rows']} rows sampled)"
        )
    return lines


def _sizes(result: dict) -> list[str]:
    first = next(iter(result["algorithms"].values()))
    return list(first["ratio_by_rows_per_pack"])


def _fmt(value: float | None) -> str:
    return ">max" if value is None else f"{value:g}"


def run(
    dataset: str,
    *,
    limit: int | None,
    json_path: Path | None,
    png_path: Path | None,
    target: float = TARGET_SHARE,
    max_pack_bytes: int = MAX_PACK_BYTES,
) -> dict:
    from veil.kv.codec import CODEC_IDS
    from veil_dev.bench.kv.datasets import load_records

    started = time.perf_counter()
    records = load_records(dataset, limit)
    result = report(dataset, records, measure(records))
    result["recommended"] = recommend(
        records, tuple(CODEC_IDS), target=target, max_pack_bytes=max_pack_bytes
    )
    result["seconds"] = round(time.perf_counter() - started, 2)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    if png_path:
        plot(result, png_path)
    return result
