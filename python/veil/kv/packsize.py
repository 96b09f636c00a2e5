"""Choosing a table's pack size from its data (MiniCrypt §3 and §8.3).

A pack of n consecutive rows compresses better as n grows, quickly at first
and then approaching the ratio of the whole dataset compressed as one blob
(Figure 2). A point read inflates a whole pack, so the best pack is the
*smallest* one whose ratio reaches a target share of the whole-dataset ratio
(default 90%), and never one larger than a read-cost cap (``max_pack_bytes``
of plaintext a point read may have to inflate, default 64 KiB). When no size
within the cap reaches the target, the largest size within the cap is chosen:
the best compression the read cost allows.

The curve is measured on a sample of the first batch a table receives, cut
into real packs (the record list of :mod:`veil.kv.pack`, keys included) and
compressed with the table's codec; each pack is charged the bytes its envelope
and server row add (nonce, GCM tag, length, update-if tag, packID) and the
server's page slack (``SERVER_SLACK``), so the ratio is the one the server's
disk will see. The sample is a few evenly spaced runs of
consecutive rows, picked by position only, so the same batch always gives the
same choice.

Blocked packs (``compression="zstd-dict"``, envelope version 3) separate the
two sizes: a point read inflates one *block*, so the curve chooses the rows
per block (the smallest block reaching the target within ``max_block_bytes``,
default 16 KiB), and a pack holds as many whole blocks as make about
``PACK_STORED_BYTES`` stored, which spreads the envelope and the server row
over many rows (:func:`choose_blocked`).

``veil kv packsize`` prints the same recommendation for a file of records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from veil.kv import codec
from veil.kv.pack import serialize_entries

CANDIDATE_ROWS = (1, 2, 3, 5, 8, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000)
TARGET_SHARE = 0.90
MAX_PACK_BYTES = 64 * 1024
SAMPLE_RUNS = 4
RUN_ROWS = 2 * CANDIDATE_ROWS[-1]  # a run holds two of the largest packs
# Envelope (version, codec, nonce, GCM tag), length prefix, update-if tag: per
# stored pack on top of its compressed bytes and its packID.
ENVELOPE_BYTES = 2 + 12 + 16 + 4 + 16
MIN_SAMPLE_ROWS = 2 * 8  # fewer rows say nothing about a curve
MAX_BLOCK_BYTES = 16 * 1024
# Blocks are estimated as bulk writes compress them (zstd 19, ~4 MB/s), so on a
# smaller sample than packs: the start of each run.
BLOCK_SAMPLE_RUNS, BLOCK_SAMPLE_ROWS = 4, 320
# Stored bytes of a blocked pack: large against its ~60 bytes of envelope and
# server row and against SQLite's 1 KiB pages (a pack overflows into full pages
# and wastes at most part of one: 16 KB packs take 1.01-1.02x their bytes on
# disk, 4 KB packs ~1.06x), and few packs per range of 1,000 keys; a point read
# still opens one block of it. (With the first round's 64 KiB pages, 4 KB was
# the best size: the end of a page held about half a pack of slack.)
PACK_STORED_BYTES = 16 * 1024
# A blocked pack's own bytes (header, nonce, index length and tag, update-if
# tag) and each block's (GCM tag, its index entry: about 3 bytes of first key
# past the shared prefix and a length).
BLOCKED_PACK_BYTES = 6 + 12 + 4 + 16 + 16 + 1
BLOCK_BYTES = 16 + 3 + 2
# What the server's storage adds around the packs' bytes, charged to every
# curve point so that the target holds on disk, not only in the packs: SQLite
# pages measured 1.01-1.05x the packs (backends/sqlite.py), Cassandra's
# SSTables 1.00-1.05x.
SERVER_SLACK = 1.03

Entry = tuple[bytes, bytes]  # (encoded key, value)
Compress = Callable[[bytes], bytes]


@dataclass(frozen=True)
class PackSizeChoice:
    """The chosen rows per pack and the curve point it rests on."""

    pack_rows: int
    ratio: float  # raw value bytes / stored bytes at pack_rows
    whole_ratio: float  # raw value bytes / the sample compressed as one blob
    target: float
    max_pack_bytes: int
    sample_rows: int
    codec: str
    reached_target: bool
    block_rows: int | None = None  # blocked packs: rows per block (pack_rows is a multiple)

    def record(self) -> dict[str, object]:
        """What the table's catalogue entry keeps about the choice."""
        return asdict(self)


def sample_runs(entries: Sequence[Entry]) -> list[Sequence[Entry]]:
    """Up to SAMPLE_RUNS evenly spaced runs of RUN_ROWS consecutive entries."""
    if len(entries) <= SAMPLE_RUNS * RUN_ROWS:
        return [entries]
    stride = (len(entries) - RUN_ROWS) // (SAMPLE_RUNS - 1)
    return [entries[i * stride : i * stride + RUN_ROWS] for i in range(SAMPLE_RUNS)]


def codec_compress(codec_name: str) -> Compress:
    """The plain codec a ``compression`` option names (zstd for its dictionary form)."""
    codec_id = codec.ZSTD if codec_name == "zstd-dict" else codec.codec_id(codec_name)
    return lambda data: codec.compress(codec_id, data)


def whole_ratio(runs: Sequence[Sequence[Entry]], codec_name: str) -> float:
    """Raw value bytes / the sample's values compressed as one blob (the upper bound)."""
    whole = b"".join(value for run in runs for _, value in run)
    return len(whole) / max(1, len(codec_compress(codec_name)(whole)))


def stored_ratio(runs: Sequence[Sequence[Entry]], compress: Compress, rows: int) -> float:
    """Raw value bytes / stored bytes when each run is cut into packs of ``rows``."""
    raw = stored = 0
    for run in runs:
        for start in range(0, len(run), rows):
            piece = run[start : start + rows]
            raw += sum(len(value) for _, value in piece)
            compressed = compress(serialize_entries(piece))
            stored += len(compressed) + ENVELOPE_BYTES + len(piece[0][0])
    return raw / (stored * SERVER_SLACK)


def choose_pack_rows(
    entries: Sequence[Entry],
    codec_name: str,
    *,
    target: float = TARGET_SHARE,
    max_pack_bytes: int = MAX_PACK_BYTES,
    default: int = 50,
    compress: Compress | None = None,
    reference: Sequence[Entry] | None = None,
) -> PackSizeChoice:
    """The smallest pack reaching ``target`` x the whole-sample ratio within the read cap.

    ``entries`` are (encoded key, value) pairs in key order. Too small a sample
    (fewer than MIN_SAMPLE_ROWS rows) gives ``default``. ``compress`` is how
    packs will be compressed (default: the codec; with a trained dictionary,
    its compressor); the whole-sample ratio always uses the plain codec, on
    ``reference`` when given (the batch in key order, when ``entries`` are in
    the pack order of hash partitions).
    """
    compress = compress or codec_compress(codec_name)
    runs = sample_runs(entries)

    def measure(rows: int) -> float:
        return stored_ratio(runs, compress, rows)

    count = sum(len(run) for run in runs)
    if count < MIN_SAMPLE_ROWS:
        return PackSizeChoice(default, 0.0, 0.0, target, max_pack_bytes, count, codec_name, False)
    mean_row = sum(len(k) + len(v) + 8 for run in runs for k, v in run) / count
    affordable = [n for n in CANDIDATE_ROWS if n == 1 or n * mean_row <= max_pack_bytes]
    whole = whole_ratio(sample_runs(reference) if reference else runs, codec_name)
    longest = max(len(run) for run in runs)
    chosen, ratio = _first_reaching(affordable, longest, target * whole, measure)
    reached = ratio >= target * whole
    return PackSizeChoice(chosen, ratio, whole, target, max_pack_bytes, count, codec_name, reached)


def blocked_point(
    runs: Sequence[Sequence[Entry]], compress: Compress, block_rows: int
) -> tuple[float, int]:
    """(raw value bytes / stored bytes, rows per pack) with blocks of ``block_rows``.

    A pack holds as many whole blocks as make about PACK_STORED_BYTES stored.
    """
    raw, sizes = 0, []
    for run in runs:
        for start in range(0, len(run), block_rows):
            piece = run[start : start + block_rows]
            raw += sum(len(value) for _, value in piece)
            sizes.append(len(compress(serialize_entries(piece))) + BLOCK_BYTES)
    per_pack = max(1, round(PACK_STORED_BYTES * len(sizes) / sum(sizes)))
    pack_rows = block_rows * per_pack
    packs = sum(-(-len(run) // pack_rows) for run in runs)
    key_bytes = len(runs[0][0][0])
    stored = sum(sizes) + packs * (BLOCKED_PACK_BYTES + key_bytes)
    return raw / (stored * SERVER_SLACK), pack_rows


def choose_blocked(
    entries: Sequence[Entry],
    compress: Compress,
    *,
    block_rows: int | None = None,
    reference: Sequence[Entry] | None = None,
    target: float = TARGET_SHARE,
    max_block_bytes: int = MAX_BLOCK_BYTES,
    default: int = 50,
) -> PackSizeChoice:
    """Rows per block (the smallest reaching ``target`` x whole within the cap) and per pack.

    ``compress`` compresses one block as the store will (zstd at the bulk
    level, with the table's dictionary when it has one); ``block_rows`` fixes
    the block and leaves only the pack to choose; ``reference`` is as for
    :func:`choose_pack_rows`.
    """
    runs = sample_runs(entries)
    count = sum(len(run) for run in runs)
    if count < MIN_SAMPLE_ROWS:
        rows = block_rows or default
        return PackSizeChoice(
            rows, 0.0, 0.0, target, max_block_bytes, count, "zstd-dict", False, rows
        )
    mean_row = sum(len(k) + len(v) + 2 for run in runs for k, v in run) / count
    affordable = [n for n in CANDIDATE_ROWS if n == 1 or n * mean_row <= max_block_bytes]
    # Issue 14's reference: the whole dataset, zlib, in key order (``reference``).
    whole = whole_ratio(sample_runs(reference) if reference else runs, "zlib")
    longest = max(len(run) for run in runs)
    points: dict[int, tuple[float, int]] = {}
    sample = [run[:BLOCK_SAMPLE_ROWS] for run in runs[:BLOCK_SAMPLE_RUNS]]
    longest = min(longest, BLOCK_SAMPLE_ROWS)

    def measure(rows: int) -> float:
        points[rows] = blocked_point(sample, compress, rows)
        return points[rows][0]

    if block_rows is not None:
        chosen, ratio = block_rows, measure(block_rows)
    else:
        chosen, ratio = _first_reaching(affordable, longest, target * whole, measure)
    return PackSizeChoice(
        points[chosen][1],
        ratio,
        whole,
        target,
        max_block_bytes,
        count,
        "zstd-dict",
        ratio >= target * whole,
        chosen,
    )


def _first_reaching(
    candidates: Sequence[int], longest: int, goal: float, measure: Callable[[int], float]
) -> tuple[int, float]:
    """The first candidate (ascending, at most ``longest``) whose ratio reaches ``goal``.

    When none does, the largest one measured, with its ratio.
    """
    ratio, chosen = 0.0, 1
    for rows in (n for n in candidates if n <= longest):
        ratio, chosen = measure(rows), rows
        if ratio >= goal:
            break
    return chosen, ratio
