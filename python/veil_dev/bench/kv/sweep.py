"""``veil kv sweep``: ratio and point-read cost against rows per pack, with and without a dictionary.

Issue 14 asks what a trained zstd dictionary buys: small packs (cheap point
reads, which inflate a whole pack) that compress like large ones. For each
rows-per-pack value and each compression (plain zstd, zstd with the table's
trained dictionary) this loads the same records into a fresh SQLite store and
measures

* the stored ratio (raw value bytes / pack bytes, dictionaries included) and
  the on-disk ratio (SQLite pages after ``VACUUM``), against the whole dataset
  compressed with zlib (and with zstd) as one blob;
* point reads without a pack cache, against the per-row baseline (each row
  compressed on its own, with zstd or zlib, whichever reads faster, and
  encrypted) on the same file.

Blocked packs (issue 14, envelope version 3: ``compression="zstd-dict"``
writes them) are swept twice: one block per pack (``zstd-dict/N``: a small
dictionary pack, as before blocks existed) and ``blocks/B``: packs of about
``PACK_STORED_BYTES`` stored (the store's rule: 16 KB) cut into blocks of B rows, of
which a point read opens one. ``chosen`` is the store's own choice from the data (no ``pack_rows``).

Point reads are timed in interleaved rounds (every configuration once per
round, then the next round), so load from other processes hits all of them
alike; each figure is the median over rounds of a round's median latency.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zstandard

import veil.kv
from veil.crypto.keys import KeyLabel, MasterKey
from veil.kv.backends.sqlite import SQLiteBackend
from veil.kv.envelope import Envelope
from veil_dev.bench.kv.clients import RowClient

PACK_ROWS = (10, 20, 50, 100, 200)
BLOCK_ROWS = (4, 8, 16, 32, 64)
COMPRESSIONS = ("zstd", "zstd-dict", "blocks")
ROUNDS = 7


def run(
    dataset: str,
    *,
    records: int,
    reads: int = 300,
    pack_rows: tuple[int, ...] = PACK_ROWS,
    block_rows: tuple[int, ...] = BLOCK_ROWS,
    json_path: Path | None = None,
    png_path: Path | None = None,
) -> dict[str, Any]:
    from veil_dev.bench.kv.datasets import load_records

    values = load_records(dataset, records)
    raw = sum(len(v) for v in values)
    whole = b"".join(values)
    result: dict[str, Any] = {
        "dataset": dataset,
        "records": len(values),
        "raw_bytes": raw,
        "whole_ratio_zlib": round(raw / len(zlib.compress(whole, 6)), 3),
        "whole_ratio_zstd": round(raw / len(zstandard.ZstdCompressor(level=3).compress(whole)), 3),
        "configs": [],
    }
    master = MasterKey.generate()
    keys = np.random.default_rng(7).integers(0, len(values), reads * ROUNDS).tolist()
    with tempfile.TemporaryDirectory(prefix="veil-kv-sweep-") as work:
        url = f"sqlite:///{work}/sweep.db"
        stores, readers = _load(url, master, values, _configs(pack_rows, block_rows), result)
        timings = _time_rounds(readers, keys, values, reads)
        for store in stores:
            store.close()
    for config in result["configs"]:
        config["point_read_us"] = timings[config["name"]]
    # The per-row baseline at its fastest codec (rows are short: zlib or zstd may win).
    baseline = min(timings["per_row"], timings["per_row_zlib"])
    result["per_row_point_read_us"] = baseline
    result["per_row_point_read_us_by_codec"] = {
        "zstd": timings["per_row"],
        "zlib": timings["per_row_zlib"],
    }
    for config in result["configs"]:
        config["point_read_over_per_row"] = round(config["point_read_us"] / baseline, 2)
        config["disk_share_of_whole_zlib"] = round(
            config["disk_ratio"] / result["whole_ratio_zlib"], 3
        )
    _write(result, json_path, png_path)
    return result


Config = tuple[str, str, int | None, int | None]  # name, compression, pack rows, block rows


def _configs(pack_rows: tuple[int, ...], block_rows: tuple[int, ...]) -> list[Config]:
    configs: list[Config] = []
    for rows in pack_rows:
        configs.append((f"zstd/{rows}", "zstd", rows, None))
        configs.append((f"zstd-dict/{rows}", "zstd-dict", rows, rows))
    for rows in block_rows:  # the store fills packs of ~16 KB stored with whole blocks
        configs.append((f"blocks/{rows}", "zstd-dict", None, rows))
    configs.append(("chosen", "zstd-dict", None, None))
    return configs


def _load(
    url: str,
    master: MasterKey,
    values: list[bytes],
    configs: list[Config],
    result: dict[str, Any],
) -> tuple[list[veil.kv.Store], dict[str, Any]]:
    raw = result["raw_bytes"]
    stores: list[veil.kv.Store] = []
    readers: dict[str, Callable[[int], bytes | None]] = {}
    for name, compression, rows, blocks in configs:
        store = veil.kv.open(
            url,
            master,
            pack_rows=rows,
            block_rows=blocks,
            compression=compression,
            table=name.replace("/", "_").replace("-", "_"),
            pack_cache=0,
        )
        store.put_many(enumerate(values))
        stores.append(store)
        readers[name] = store.get
        stored = store.backend.stored_bytes(store.packs.table) + store.dictionary_bytes()
        result["configs"].append(
            {
                "name": name,
                "compression": name.split("/")[0],
                "pack_rows": store.config.pack_rows,
                "block_rows": store.packs.block_rows if compression == "zstd-dict" else None,
                "stored_ratio": round(raw / stored, 3),
                "dictionary_bytes": store.dictionary_bytes(),
                "_tables": [store.packs.table],
                "_dict": store.dictionary_bytes(),
            }
        )
    backend = stores[0].backend
    for codec_name, name in (("zstd", "per_row"), ("zlib", "per_row_zlib")):
        envelope = Envelope(master.derive(KeyLabel("bench-row", name)), name, codec_name, ())
        row_client = RowClient(name, backend, f"sweep_{name}", 1, envelope)
        row_client.put_many(enumerate(values))
        readers[name] = row_client.get
    assert isinstance(backend, SQLiteBackend)
    backend.compact()
    for config in result["configs"]:
        disk = sum(backend.table_disk_bytes(t) for t in config.pop("_tables")) + config.pop("_dict")
        config["disk_ratio"] = round(raw / disk, 3)
    return stores, readers


def _time_rounds(
    readers: dict[str, Any], keys: list[int], values: list[bytes], reads: int
) -> dict[str, float]:
    """Median over rounds of each reader's median point-read latency, in µs."""
    per_round: dict[str, list[float]] = {name: [] for name in readers}
    for round_number in range(ROUNDS):
        batch = keys[round_number * reads : (round_number + 1) * reads]
        for name, get in readers.items():
            latencies = []
            for key in batch:
                began = time.perf_counter_ns()
                value = get(key)
                latencies.append(time.perf_counter_ns() - began)
                if value != values[key]:
                    raise AssertionError(f"{name} returned a wrong value for key {key}")
            per_round[name].append(statistics.median(latencies) / 1000)
    return {name: round(statistics.median(rounds), 1) for name, rounds in per_round.items()}


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        f"{result['dataset']}: {result['records']} records, whole-dataset ratio zlib "
        f"{result['whole_ratio_zlib']} / zstd {result['whole_ratio_zstd']}; per-row point read "
        f"{result['per_row_point_read_us']} µs (by codec: {result['per_row_point_read_us_by_codec']})",
        f"{'config':<16}{'rows':>11}{'stored':>8}{'on disk':>9}{'disk/whole':>11}"
        f"{'read µs':>9}{'/per-row':>9}",
    ]
    for c in result["configs"]:
        rows = f"{c['pack_rows']}/{c['block_rows'] or '-'}"
        lines.append(
            f"{c['name']:<16}{rows:>11}{c['stored_ratio']:>8}{c['disk_ratio']:>9}"
            f"{c['disk_share_of_whole_zlib']:>11.0%}{c['point_read_us']:>9}"
            f"{c['point_read_over_per_row']:>9}"
        )
    return lines


def _write(result: dict[str, Any], json_path: Path | None, png_path: Path | None) -> None:
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    if png_path:
        _plot(result, png_path)


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ratio_ax, read_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for compression in COMPRESSIONS:
        rows = [c for c in result["configs"] if c["compression"] == compression]
        key = "block_rows" if compression == "blocks" else "pack_rows"
        xs = [c[key] for c in rows]
        ratio_ax.plot(xs, [c["stored_ratio"] for c in rows], marker="o", label=compression)
        read_ax.plot(
            xs, [c["point_read_over_per_row"] for c in rows], marker="o", label=compression
        )
    ratio_ax.axhline(result["whole_ratio_zlib"], linestyle="--", color="grey", label="whole (zlib)")
    ratio_ax.axhline(
        0.9 * result["whole_ratio_zlib"], linestyle=":", color="grey", label="90% of whole"
    )
    read_ax.axhline(1.3, linestyle=":", color="grey", label="1.3x per-row")
    for ax, label in ((ratio_ax, "stored compression ratio"), (read_ax, "point read / per-row")):
        ax.set_xscale("log")
        ax.set_xlabel("rows per pack; blocks: rows per block (log)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"veil kv sweep, SQLite: {result['records']} records of {result['dataset']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
