"""Bulk load of an ``ore`` field's B+-tree: a batch sorted by key built into nodes bottom up.

Inserted entry by entry, a large ``insert_many`` into a new field lands in the
root leaf, which splits, and each split is written node by node and announced
to its parent with a walk from the root: at a million values that took over an
hour on FerretDB (bench/RESULTS.md, doc21), where every node lookup is a scan.
While the root is still a single leaf, the batch and that leaf's keys are
instead merged on the client and cut into full levels here: leaves of
``fill`` keys, then inner nodes over them, until one level fits under the root.
:meth:`veil.documents.oretree.OreTree.insert_sorted` writes the new nodes with a
few ``insert_many`` commands and switches the root over with one claimed write,
so readers see either the old root or the whole new tree.

The built nodes keep the tree's invariants (:mod:`veil.documents.oretree`):
child ``c`` of an inner node holds keys between separators ``c - 1`` and ``c``;
every node but a level's last has a right sibling ``n`` and the fence ``f``, the
smallest key under that sibling; an inner level's separator is the smallest key
of the subtree right of it and is not repeated in the node below.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from veil.documents.ore import rank


def merge_positions(
    old_keys: Sequence[bytes], count: int, left_of: Callable[[int], bytes]
) -> list[int]:
    """Where each of ``old_keys`` (right ciphertexts, sorted) goes among ``count`` new
    entries sorted by key: the number of new entries placed before it.

    New entries go after the old keys equal to them, as an entry-by-entry insert
    puts them. Only the client's *left* ciphertexts compare, and making one costs
    as much as the ORE encryption itself, so each old key is placed by a binary
    search that makes the left ciphertexts of ``log2(count)`` new entries
    (``left_of(i)``), not of all of them."""
    positions = []
    low = 0
    for key in old_keys:
        high = count
        while low < high:  # the first new entry at or above ``key``
            middle = (low + high) // 2
            if rank(left_of(middle), [key], inclusive=True) == 1:
                high = middle
            else:
                low = middle + 1
        positions.append(low)  # nondecreasing: later old keys start from here
    return positions


def merge(
    old_keys: list[bytes], old_items: list[Any], positions: list[int],
    new_keys: Sequence[bytes], new_items: Sequence[Any],
) -> tuple[list[bytes], list[Any]]:  # fmt: skip
    """The old and new keys (and items) in one sorted list, old key ``j`` placed
    before new entry ``positions[j]``."""
    keys: list[bytes] = []
    items: list[Any] = []
    taken = 0
    for key, item, position in zip(old_keys, old_items, positions, strict=True):
        keys.extend(new_keys[taken:position])
        items.extend(new_items[taken:position])
        taken = position
        keys.append(key)
        items.append(item)
    keys.extend(new_keys[taken:])
    items.extend(new_items[taken:])
    return keys, items


@dataclass
class Piece:
    """One built node (version 0 when written) and the smallest key under it."""

    id: str
    level: int
    keys: list[bytes]
    items: list[Any]
    next: str | None
    fence: bytes | None
    low: bytes


class Built:
    """A tree built from sorted keys: the root's content and the nodes under it.

    ``levels`` lists the levels under the root, the root's children first."""

    def __init__(self, keys: list[bytes], items: list[Any], capacity: int, fill: int):
        pieces = _leaves(keys, items, fill)
        self.levels: list[list[Piece]] = []
        if len(pieces) == 1:  # it all fits in the root leaf
            self.root_level, self.root_keys, self.root_items = 0, keys, items
            return
        while len(pieces) > capacity + 1:  # an inner node holds len(keys) + 1 children
            self.levels.append(pieces)
            pieces = _parents(pieces, fill)
        self.levels.append(pieces)
        self.levels.reverse()
        top = self.levels[0]
        self.root_level = top[0].level + 1
        self.root_keys = [piece.low for piece in top[1:]]
        self.root_items = [piece.id for piece in top]


def _leaves(keys: list[bytes], items: list[Any], fill: int) -> list[Piece]:
    cuts = _cuts(len(keys), fill)
    parts = [(keys[a:b], items[a:b]) for a, b in itertools.pairwise(cuts)]
    return _chained(0, parts, [part_keys[0] for part_keys, _ in parts])


def _parents(children: list[Piece], fill: int) -> list[Piece]:
    """Inner nodes one level above ``children``, ``fill + 1`` children each: a node's
    keys are the smallest keys under its children but the first, which moves up."""
    lows = [child.low for child in children]
    cuts = _cuts(len(children), fill + 1)
    parts = [
        (lows[a + 1 : b], [child.id for child in children[a:b]])
        for a, b in itertools.pairwise(cuts)
    ]
    return _chained(children[0].level + 1, parts, [lows[a] for a in cuts[:-1]])


def _chained(
    level: int, parts: list[tuple[list[bytes], list[Any]]], lows: list[bytes]
) -> list[Piece]:
    """One level's nodes, each pointing to its right sibling and fenced by that sibling's
    smallest key; the level's last is unbounded."""
    ids = [os.urandom(8).hex() for _ in parts]
    nexts: list[str | None] = [*ids[1:], None]
    fences: list[bytes | None] = [*lows[1:], None]
    return [
        Piece(ids[i], level, keys, items, nexts[i], fences[i], lows[i])
        for i, (keys, items) in enumerate(parts)
    ]


def _cuts(count: int, per_node: int) -> list[int]:
    """Boundaries cutting ``count`` things into ``ceil(count / per_node)`` even parts."""
    parts = max(1, -(-count // per_node))
    return [round(i * count / parts) for i in range(parts + 1)]
