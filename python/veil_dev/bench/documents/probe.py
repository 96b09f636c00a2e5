"""What a MongoDB-wire server's ``$group`` costs, measured with plain pymongo (no keys).

``python -m veil_dev.bench.documents.probe --docs N [--url URL] [--json PATH]`` loads
``N`` documents in several stored shapes and times (median of ``--runs``):

* ``plain``: ``$group`` by a 10-valued int with ``$sum`` of an int (the baseline
  of ``veil documents bench``'s sums);
* ``shapes``: one ``$group`` ``$sum`` and one find of every document, for the
  stored shapes an ASHE ``h_add`` field could take: Veil's
  ``{v, l, h, i: [id]}`` (``nested``), ``{l, h, i: id}`` (``scalar_id``),
  three top-level int64s (``flat``), one 16-byte binary (``binary``), beside a
  13-byte binary group key;
* ``chunk_bitmaps``: the id bitmaps of a grouped ASHE sum as the server could
  return them: ``$group`` by (key, 62-id chunk) with ``$sum`` of
  ``2^(id mod 62)``, against ``$group`` by key alone over the same documents;
* ``second_accumulator``: whether a ``$group`` computes its second ``$sum``;
* ``server_path``: the commands of Veil's server-side ASHE sum over the ``flat``
  shape, one at a time and together: one ``$group`` per half, the find of every
  summed id with its group key (``ids_find_ms``), the three issued at once from
  three threads (``parallel_ms``), and a ``$group`` over a one-field form
  (``one_field``: a single int64 ciphertext and its id, what an ASHE over a
  modulus small enough for one int64 ``$sum`` would store);
* ``capabilities``: which of ``$push``, ``$min``, ``$facet``, ``$count`` and
  ``$unwind`` with ``includeArrayIndex`` the server runs (or its error).

The queries run interleaved, each once a round, so that a shared machine's
load falls on all of them alike; figures are medians of the rounds.

It answers whether per-chunk id bitmaps can make server-side sums cheap on a
given server: FerretDB 1.24 looks each document's group up in a list of the
groups seen so far (``groupMap.addOrAppend``), so a ``$group`` costs
O(documents x groups) and one row per 62 ids is quadratic.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pymongo
import pymongo.errors
from bson.int64 import Int64

from veil_dev.bench.documents.bench import server_url

CHUNK_IDS = 62
KEYS = 10


def _timed_ms(query: Callable[[], Any]) -> float:
    start = time.perf_counter()
    query()
    return 1000 * (time.perf_counter() - start)


def _aggregate(collection: Any, pipeline: list[dict[str, Any]]) -> list[Any]:
    return list(collection.aggregate(pipeline))


def _find_all(collection: Any) -> list[Any]:
    return list(collection.find({}, batch_size=20_000))


def _ids_find(collection: Any) -> list[Any]:
    """The find of Veil's server path: each summed id with its group key."""
    return list(collection.find({}, {"_id": 0, "k": 1, "fi": 1}, batch_size=20_000))


def _server_path_at_once(collection: Any) -> None:
    """The server path's three commands (a ``$group`` per half, the ids find) issued
    together, to see whether the server runs them side by side."""
    halves = [[{"$group": {"_id": "$k", "s": {"$sum": f"${n}"}}}] for n in ("fl", "fh")]
    with ThreadPoolExecutor(3) as pool:
        waits = [pool.submit(_aggregate, collection, p) for p in halves]
        waits.append(pool.submit(_ids_find, collection))
        for wait in waits:
            wait.result()


CAPABILITIES: dict[str, list[dict[str, Any]]] = {
    "push": [{"$group": {"_id": "$g", "p": {"$push": "$v"}}}],
    "min": [{"$group": {"_id": "$g", "p": {"$min": "$v"}}}],
    "facet": [{"$facet": {"n": [{"$count": "n"}]}}],
    "count": [{"$count": "n"}],
    "unwind_index": [{"$unwind": {"path": "$v", "includeArrayIndex": "at"}}, {"$limit": 1}],
}


def _capabilities(collection: Any) -> dict[str, str]:
    """Which stages and accumulators the server runs: "yes", or its error's first line."""
    out = {}
    for name, pipeline in CAPABILITIES.items():
        try:
            _aggregate(collection, pipeline)
            out[name] = "yes"
        except pymongo.errors.PyMongoError as error:
            out[name] = str(error).split(", full error")[0][:120]
    return out


def _shapes(rng: random.Random) -> dict[str, Callable[[int], dict[str, Any]]]:
    keys = [b"\x01" + rng.randbytes(12) for _ in range(KEYS)]
    word = lambda bits: Int64(rng.getrandbits(bits))  # noqa: E731
    return {
        "plain": lambda i: {"_id": i, "g": i % KEYS, "v": (i * 7919) % 100_000 - 50_000},
        "nested": lambda i: {
            "_id": i, "k": keys[i % KEYS],
            "f": {"v": 1, "l": word(32), "h": word(32), "i": [word(63)]},
        },
        "scalar_id": lambda i: {
            "_id": i, "k": keys[i % KEYS], "f": {"l": word(32), "h": word(32), "i": word(63)},
        },
        "flat": lambda i: {
            "_id": i, "k": keys[i % KEYS], "fl": word(32), "fh": word(32), "fi": word(63),
        },
        "binary": lambda i: {"_id": i, "k": keys[i % KEYS], "f": rng.randbytes(16)},
        "one_field": lambda i: {"_id": i, "k": keys[i % KEYS], "f": word(40), "fi": word(63)},
        # chained h_add (veil.documents.chains): one word, chain number, position; and the
        # two-halves form of a wider domain (two $groups), and the word without the chain
        "chain_word": lambda i: {
            "_id": i, "k": keys[i % KEYS], "f": word(48), "fc": word(63), "fp": Int64(i // KEYS),
        },
        "chain_halves": lambda i: {
            "_id": i, "k": keys[i % KEYS], "fl": word(32), "fh": word(32), "fc": word(63),
            "fp": Int64(i // KEYS),
        },
        "chain_word_no_chain": lambda i: {
            "_id": i, "k": keys[i % KEYS], "f": word(48), "fp": Int64(i // KEYS),
        },
        "chunked": lambda i: {
            "_id": i, "k": keys[i % KEYS], "c": Int64(i // CHUNK_IDS),
            "b": Int64(1 << (i % CHUNK_IDS)),
        },
    }  # fmt: skip


SUMMED = {"plain": ("$g", "$v"), "nested": ("$k", "$f.l"), "scalar_id": ("$k", "$f.l"),
          "flat": ("$k", "$fl"), "one_field": ("$k", "$f"),
          "binary": ("$k", "$f"), "chunked": ("$k", "$b"), "chain_word": ("$k", "$f"),
          "chain_halves": ("$k", "$fl"), "chain_word_no_chain": ("$k", "$f")}  # fmt: skip


def probe(url: str, docs: int, runs: int, seed: int, bitmaps: bool = True) -> dict[str, Any]:
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(url)
    database = client[f"probe_{docs}_{os.getpid()}"]
    try:
        for name, make in _shapes(random.Random(seed)).items():
            rows = [make(i) for i in range(docs)]
            for at in range(0, docs, 1000):
                database[name].insert_many(rows[at : at + 1000])
        chunked = database["chunked"]
        by_chunk = [{"$group": {"_id": {"k": "$k", "c": "$c"}, "s": {"$sum": "$b"}}}]
        queries: dict[tuple[str, str], Callable[[], Any]] = {}
        for name, (key, value) in SUMMED.items():
            group = [{"$group": {"_id": key, "s": {"$sum": value}}}]
            queries[name, "group_ms"] = partial(_aggregate, database[name], group)
            queries[name, "find_ms"] = partial(_find_all, database[name])
        if bitmaps:  # quadratic on FerretDB 1.24: minutes a round at 100k
            queries["chunk_bitmaps", "group_ms"] = partial(_aggregate, chunked, by_chunk)
        flat = database["flat"]
        halves = [[{"$group": {"_id": "$k", "s": {"$sum": f"${h}"}}}] for h in ("fl", "fh")]
        queries["chain_halves", "two_groups_ms"] = lambda: [
            _aggregate(database["chain_halves"], group) for group in halves
        ]
        queries["server_path", "ids_find_ms"] = partial(_ids_find, flat)
        queries["server_path", "parallel_ms"] = partial(_server_path_at_once, flat)
        times: dict[tuple[str, str], list[float]] = {label: [] for label in queries}
        for _ in range(runs):  # interleaved: each query once a round, so load hits all alike
            for label, query in queries.items():
                times[label].append(_timed_ms(query))
        out: dict[str, Any] = {"docs": docs, "runs": runs}
        for (name, figure), values in times.items():
            out.setdefault(name, {})[figure] = statistics.median(values)
        if bitmaps:
            out["chunk_bitmaps"]["rows"] = len(_aggregate(chunked, by_chunk))
            out["chunk_bitmaps"]["by_key_group_ms"] = out["chunked"]["group_ms"]
        two = [{"$group": {"_id": "$g", "a": {"$sum": "$v"}, "n": {"$sum": 1}}}]
        first = next(iter(database["plain"].aggregate(two)))
        out["second_accumulator"] = {"computed": first["n"] != 0, "first_row": first}
        out["server_path"]["group_ms"] = out["flat"]["group_ms"]
        out["capabilities"] = _capabilities(database["plain"])
        return out
    finally:
        client.drop_database(database.name)
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--url", default=None, help="a MongoDB-wire server (default: start one)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--no-bitmaps", action="store_true", help="skip the (key, chunk) $group (slow at 100k)"
    )
    args = parser.parse_args(argv)
    from veil_dev.bench.report import write_json

    with server_url(args.url) as url:
        result = probe(url, args.docs, args.runs, args.seed, not args.no_bitmaps)
    for name, figure in result.items():
        print(name, figure)
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
