"""A B+-tree of ORE right ciphertexts, kept by the client in the server (``ore`` index fields).

Each ``ore`` field has its own tree: one server document per node, under a
string ``_id`` (an index lookup on MongoDB; FerretDB 1.24 scans in SQL for it,
stopping at the match: docs/documents.md). A node holds
sorted Lewi–Wu *right* ciphertexts of order keys (``k``) and, in leaves, the
sealed tag of the document value each key stands for (``i``), or, in inner
nodes, its children's ids (``i``, one more than keys). The client compares its
own *left* ciphertexts with them (:mod:`veil.documents.ore`); the server only
stores. A range query walks the tree one level per round trip (the nodes of a
level are fetched in parallel), so with fan-out ``CAPACITY`` = 128 a million
entries take three: root, inner level, leaves. The leaves' tags, decrypted,
become the server filter ``{field.k: {$in: tags}}`` on the documents.

Concurrency (B-link tree, Lehman and Yao): every node has a version ``v``, a
right sibling ``n`` and an upper fence ``f`` (the first key of that sibling).
A writer changes a node only by first inserting the claim ``"id@v+1"`` into the
claims collection: ``_id`` uniqueness is the one atomic test-and-set a
MongoDB-wire server gives (FerretDB's conditional updates are not atomic), so
exactly one writer wins each version; the others read the node again and
retry. A writer killed between its claim and its write would leave the node
unwritable, so claims have the lease of document versions
(:mod:`veil.documents.versions`): a writer that has watched a claim stand, the
node unchanged, for ``LEASE`` seconds claims the next generation
(``"id@v+1|1"``, ...), which again only one writer wins, and a claim's holder
writes only within ``LEASE / 4`` of sending it. A split first inserts the new right nodes, then switches the old node
over (its claim), then adds the separators to the parent; a reader that meets
a node whose fence is below its bound follows ``n``, so nothing is missed in
between. Entries are never removed: a document's write draws a fresh tag, so
the entries of old values match no document (docs/security.md says what the
tree keeps). A large batch meeting a root that is one leaf is built bottom up
instead (:mod:`veil.documents.orebulk`) and switched in by one claim of the root.
"""

from __future__ import annotations

import bisect
import itertools
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pymongo.errors
from pymongo.collection import Collection as ServerCollection

from veil.documents.errors import ServerError
from veil.documents.ore import rank
from veil.documents.orebulk import Built, merge, merge_positions
from veil.documents.versions import Backoff, Lease, within_lease

#: Keys per node (the fan-out); a fuller node splits into pieces of at most this many.
CAPACITY = 128
ROOT = "root"
#: Seconds a write waits out other writers (a node claimed but not yet written, a
#: split's new node not yet in its parent) before it gives up: long enough for a
#: writer the machine has descheduled and for a dead writer's claim to pass its
#: lease (``versions.LEASE``), short enough to report a tree that stays stuck.
WRITE_PATIENCE = 30.0
#: Reads of a node whose keys and items disagree before it is reported malformed.
TORN_READS = 5
_FETCHERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="veil-ore-tree")


@dataclass
class Node:
    """One tree node as read (``version``) and as it will be written."""

    id: str
    version: int
    level: int  # 0 for leaves
    keys: list[bytes]
    items: list[Any]  # leaves: sealed tags; inner nodes: child ids (len(keys) + 1)
    next: str | None = None
    fence: bytes | None = None  # the first key of ``next``; None: unbounded

    @property
    def leaf(self) -> bool:
        return self.level == 0

    def document(self) -> dict[str, Any]:
        return {
            "_id": self.id, "v": self.version, "h": self.level, "k": self.keys,
            "i": self.items, "n": self.next, "f": self.fence,
        }  # fmt: skip

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Node:
        try:
            node = cls(
                doc["_id"], int(doc["v"]), int(doc["h"]), list(doc["k"]), list(doc["i"]),
                doc["n"], doc["f"],
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            node = None
        if node is None or not _whole(doc):
            raise ServerError(f"ORE tree node {doc.get('_id')!r} is malformed") from None
        return node


@dataclass
class Bound:
    """One end of a range: a left ciphertext and whether the end itself is in."""

    left: bytes
    inclusive: bool


@dataclass
class Entry:
    """A key to insert: its left and right ciphertexts and its sealed tag."""

    left: bytes
    right: bytes
    tag: bytes


@dataclass
class _Group:
    node: Node
    entries: list[Entry] = field(default_factory=list)


class _Leases:
    """One write's :class:`~veil.documents.versions.Lease` on each node whose claim it
    lost: the generation of the claim to try next, and since when the one lost stood."""

    def __init__(self) -> None:
        self._leases: dict[str, Lease] = {}

    def of(self, node: Node) -> Lease:
        """The lease on ``node``'s next version, reset if ``node`` was read at another."""
        lease = self._leases.setdefault(node.id, Lease())
        lease.reset(node.version)
        return lease


class OreTree:
    """The tree of one ``ore`` field: ``nodes`` and ``claims`` are server collections."""

    def __init__(self, nodes: ServerCollection[Any], claims: ServerCollection[Any]):
        self._nodes = nodes
        self._claims = claims
        self.round_trips = 0  # node-fetch waves, for the benchmarks
        self._cached_root: Node | None = None  # an inner root (a leaf root is never cached)

    # -- reads -------------------------------------------------------------------

    def range(self, low: Bound | None, high: Bound | None) -> list[bytes]:
        """The sealed tags of every entry between ``low`` and ``high`` (None: open).

        An inner root read by an earlier walk is used again, and read afresh in
        the same wave as its children for the next walk: that saves one round
        trip, and a stale inner node is safe in a B-link tree (nodes only split
        to the right, and the siblings a split made are followed)."""
        refresh = self._cached_root is not None
        level = [self._cached_root] if self._cached_root is not None else self._fetch([ROOT])
        self._remember_root(level[0])
        while True:
            level = self._move_right(level, high)
            if level[0].leaf:
                return [t for i, n in enumerate(level) for t in _slice(n, i, level, low, high)]
            children = [c for i, n in enumerate(level) for c in _slice(n, i, level, low, high)]
            if not children:  # an empty range (its low above its high): no entry
                return []
            level = self._fetch([*children, ROOT] if refresh else children)
            if refresh:
                self._remember_root(level.pop())
                refresh = False

    def _remember_root(self, root: Node) -> None:
        self._cached_root = None if root.leaf else root

    def _move_right(self, level: list[Node], high: Bound | None) -> list[Node]:
        """Add the right siblings a split made that the parents did not list yet."""
        while True:
            missing: list[tuple[int, str]] = []
            for position, node in enumerate(level):
                following = level[position + 1].id if position + 1 < len(level) else None
                if node.next is None or node.next == following:
                    continue
                if following is not None or high is None or _at_or_above(high, node.fence):
                    missing.append((position, node.next))
            if not missing:
                return level
            found = self._fetch([node_id for _, node_id in missing])
            for (position, _), node in reversed(list(zip(missing, found, strict=True))):
                level.insert(position + 1, node)
            level = _dedupe(level)

    def _fetch(self, ids: Sequence[str]) -> list[Node]:
        """Nodes by id, in order, in one wave of parallel point lookups."""
        if not ids:
            return []
        self.round_trips += 1
        found = list(_FETCHERS.map(self._fetch_one, ids))
        return [Node.from_document(doc) for doc in found]

    def _fetch_one(self, node_id: str) -> dict[str, Any]:
        """A node's document; one whose keys and items disagree in number is read again
        a few times (on mongo-java-server, under contention, a read that overlapped a
        replace of the node has returned one version's keys with the next's items)."""
        for attempt in range(TORN_READS):
            try:
                doc = self._nodes.find_one({"_id": node_id})
            except pymongo.errors.PyMongoError as exc:
                raise ServerError(f"reading the ORE tree: {exc}") from None
            if doc is None or _whole(doc) or attempt == TORN_READS - 1:
                break
            time.sleep(0.001 * 2**attempt)
        if doc is not None:
            return doc
        if node_id == ROOT:
            self._create_root()
            return self._fetch_one(ROOT)
        raise ServerError(f"ORE tree node {node_id!r} is missing: the tree is damaged")

    def _create_root(self) -> None:
        try:
            self._nodes.insert_one(Node(ROOT, 0, 0, [], []).document())
        except pymongo.errors.DuplicateKeyError:
            pass  # another writer created it first
        except pymongo.errors.PyMongoError as exc:
            raise ServerError(f"creating the ORE tree: {exc}") from None

    # -- writes ------------------------------------------------------------------

    def insert_sorted(
        self, rights: Sequence[bytes], tags: Sequence[bytes],
        lefts: Callable[[list[int]], list[bytes]],
    ) -> None:  # fmt: skip
        """Add a batch sorted by key: right ciphertexts, sealed tags, and ``lefts``, which
        makes the left ciphertexts of the entries at given positions (as costly as the
        right ones, so made only for what a walk needs).

        A batch larger than a node meeting a root that is still one leaf is built bottom
        up with that leaf's keys (:mod:`veil.documents.orebulk`); otherwise, or if another
        writer changed the root meanwhile, each entry is walked to its leaf."""
        leases = _Leases()
        if len(rights) > CAPACITY:
            root = self._fetch([ROOT])[0]
            if root.leaf and self._bulk_load(root, rights, tags, lefts, leases):
                return
        made = lefts(list(range(len(rights))))
        self.insert((Entry(*entry) for entry in zip(made, rights, tags, strict=True)), leases)

    def _bulk_load(
        self, root: Node, rights: Sequence[bytes], tags: Sequence[bytes],
        lefts: Callable[[list[int]], list[bytes]], leases: _Leases,
    ) -> bool:  # fmt: skip
        """Build the root leaf's keys and the batch into a new tree under the root; False
        (nothing changed) if another writer claimed the root's next version first."""
        made: dict[int, bytes] = {}

        def left_of(position: int) -> bytes:
            if position not in made:
                made[position] = lefts([position])[0]
            return made[position]

        positions = merge_positions(root.keys, len(rights), left_of)
        keys, items = merge(root.keys, root.items, positions, rights, tags)
        built = Built(keys, items, CAPACITY, max(2, CAPACITY * 3 // 4))
        nodes = [
            Node(p.id, 0, p.level, p.keys, p.items, p.next, p.fence)
            for level in built.levels
            for p in level
        ]
        # the root's children first: a server that finds a document by scanning (FerretDB
        # 1.24 does, even by _id) then finds the nodes every walk reads soonest
        self._insert_nodes(nodes)
        new_root = Node(ROOT, root.version, built.root_level, built.root_keys, built.root_items)
        if self._claim_and_write(new_root, leases):
            return True
        self._delete(node.id for node in nodes)
        return False

    def insert(self, entries: Iterable[Entry], leases: _Leases | None = None) -> None:
        """Add ``entries``, given in key order; each lands exactly once whatever other
        writers do."""
        pending = list(entries)
        order = {id(e): i for i, e in enumerate(pending)}
        leases = leases or _Leases()
        patience = Backoff(WRITE_PATIENCE)
        while pending:
            located = self._locate(pending)
            pending = [e for g in located for e in self._insert_into(g, order, leases)]
            if pending and not patience.backoff():
                raise ServerError("the ORE tree kept changing under this insert; retry later")

    def _locate(self, entries: list[Entry]) -> list[_Group]:
        """The leaf each entry belongs in, one level per round trip for the whole batch."""
        groups = [_Group(self._fetch([ROOT])[0], entries)]
        while True:
            moved = [(g, e) for g in groups for e in g.entries if _beyond(g.node, e.left)]
            if moved:
                groups = self._regroup(groups, moved)
                continue
            if groups[0].node.leaf:
                return groups
            by_child: dict[str, list[Entry]] = {}
            for g in groups:
                for e in g.entries:
                    child = g.node.items[rank(e.left, g.node.keys, inclusive=True)]
                    by_child.setdefault(child, []).append(e)
            nodes = self._fetch(list(by_child))
            groups = [_Group(n, by_child[n.id]) for n in nodes]

    def _regroup(self, groups: list[_Group], moved: list[tuple[_Group, Entry]]) -> list[_Group]:
        """Send entries beyond their node's fence to its right sibling."""
        leaving = {id(e) for _, e in moved}
        targets: dict[str, list[Entry]] = {}
        for g, e in moved:
            assert g.node.next is not None  # an unbounded node has nothing beyond it
            targets.setdefault(g.node.next, []).append(e)
        kept = [_Group(g.node, [e for e in g.entries if id(e) not in leaving]) for g in groups]
        fetched = self._fetch(list(targets))
        merged = {g.node.id: g for g in kept if g.entries}
        for node in fetched:
            merged.setdefault(node.id, _Group(node)).entries.extend(targets[node.id])
        return list(merged.values())

    def _insert_into(self, group: _Group, order: dict[int, int], leases: _Leases) -> list[Entry]:
        """Put a group's entries into its leaf; the entries to retry if it changed meanwhile.

        Each entry goes after the keys equal to it. The entries (a sibling's may have
        joined the group out of order: put back in key order) are ranked among the
        leaf's keys as read and merged in one pass, not inserted one by one into a
        growing list, which is quadratic for a batch far larger than a node."""
        leaf = group.node
        entries = sorted(group.entries, key=lambda e: order[id(e)])
        ranks = [rank(e.left, leaf.keys, inclusive=True) for e in entries]  # nondecreasing
        # old key j goes after the entries ranked at or below j
        positions = [bisect.bisect_right(ranks, j) for j in range(len(leaf.keys))]
        leaf.keys, leaf.items = merge(
            leaf.keys, leaf.items, positions, [e.right for e in entries], [e.tag for e in entries]
        )
        if self._store(leaf, group.entries[0].left, leases):
            return []
        return group.entries

    def _store(self, node: Node, probe: bytes, leases: _Leases) -> bool:
        """Write ``node`` (split if it is too full); False if another writer was first."""
        if len(node.keys) <= CAPACITY:
            return self._claim_and_write(node, leases)
        if node.id == ROOT:
            return self._split_root(node, leases)
        pieces, separators = _pieces(node)
        self._insert_nodes(pieces[1:])
        left = pieces[0]
        if not self._claim_and_write(left, leases):
            self._delete(piece.id for piece in pieces[1:])
            return False
        self._add_to_parent(left, separators, [p.id for p in pieces[1:]], probe, leases)
        return True

    def _split_root(self, root: Node, leases: _Leases) -> bool:
        pieces, separators = _pieces(root)
        pieces[0].id = _fresh_id()
        self._insert_nodes(pieces)
        new_root = Node(ROOT, root.version, root.level + 1, separators, [p.id for p in pieces])
        if self._store(new_root, b"", leases):  # a root with too many pieces splits again
            return True
        self._delete(piece.id for piece in pieces)
        return False

    def _add_to_parent(
        self, child: Node, separators: list[bytes], new_ids: list[str], probe: bytes,
        leases: _Leases,
    ) -> None:  # fmt: skip
        """Insert the separators of ``child``'s split after it in its parent, retrying."""
        patience = Backoff(WRITE_PATIENCE)
        while True:
            # None: child is itself a split's new node, not in a parent yet; its
            # writer is adding it, so wait for that as for a claimed parent.
            parent = self._parent_of(child, probe)
            if parent is not None:
                position = parent.items.index(child.id)
                parent.keys[position:position] = separators
                parent.items[position + 1 : position + 1] = new_ids
                if self._store(parent, probe, leases):
                    return
            if not patience.backoff():
                break
        raise ServerError(
            f"ORE tree node {child.id!r} found no parent to join (its writer may have died "
            "mid-split) or the tree kept changing; retry later"
        )

    def _parent_of(self, child: Node, probe: bytes) -> Node | None:
        """The node one level above ``child`` that lists it, found from the root with a
        key ``child`` holds (leftmost path, then right along the level); None if no
        node lists it yet.

        Equal keys may sit on both sides of a separator, so the probe's path may land
        right of the node listing ``child``; then the level is walked again from its
        leftmost node. A parent missed so would be waited for until the writer gave up:
        CI once saw a writer of four give up after its whole patience looking for a
        parent (the cause is not confirmed; the walk from the left finds any parent)."""
        found = self._listing(child, self._level_node(child.level + 1, probe))
        if found is None:
            found = self._listing(child, self._level_node(child.level + 1, None))
        return found

    def _level_node(self, level: int, probe: bytes | None) -> Node:
        """The node of ``level`` the root's path by ``probe`` reaches (None: leftmost)."""
        node = self._fetch([ROOT])[0]
        while node.level > level:
            at = 0 if probe is None else rank(probe, node.keys, inclusive=False)
            node = self._fetch([node.items[at]])[0]
        return node

    def _listing(self, child: Node, node: Node) -> Node | None:
        """``node`` or the first node right of it along its level that lists ``child``."""
        while child.id not in node.items:
            if node.next is None:
                return None
            node = self._fetch([node.next])[0]
        return node

    def _claim_and_write(self, node: Node, leases: _Leases) -> bool:
        """Version ``node.version + 1`` of ``node``, if no other writer claimed it first.

        The claim is that of the generation ``leases`` holds for the node: a claim
        another writer left standing, the node unchanged, for ``versions.LEASE`` is
        taken over by inserting the next generation's, which exactly one writer wins.
        So the holder writes only within ``LEASE / 4`` of sending its claim; past
        that it leaves the node unwritten (False: read again and retry) and tries
        the next generation itself."""
        lease = leases.of(node)
        claimed = time.monotonic()
        try:
            self._claims.insert_one({"_id": claim_id(node.id, node.version + 1, lease.generation)})
        except pymongo.errors.DuplicateKeyError:
            lease.stood()
            return False
        except pymongo.errors.PyMongoError as exc:
            raise ServerError(f"writing the ORE tree: {exc}") from None
        if not within_lease(claimed):
            lease.gave_up()
            return False
        node.version += 1
        self._write(lambda: self._nodes.replace_one({"_id": node.id}, node.document()))
        return True

    def _insert_nodes(self, nodes: list[Node]) -> None:
        """New nodes, in one command (the driver splits it at the server's message size)."""
        if nodes:
            documents = [node.document() for node in nodes]
            self._write(lambda: self._nodes.insert_many(documents, ordered=True))

    def _delete(self, ids: Iterable[str]) -> None:
        """Drop new nodes of a split or bulk load that lost its claim (nothing points to
        them), in one command."""
        if wanted := list(ids):
            self._write(partial(self._nodes.delete_many, {"_id": {"$in": wanted}}))

    def _write(self, command: Callable[[], object]) -> None:
        try:
            command()
        except pymongo.errors.PyMongoError as exc:
            raise ServerError(f"writing the ORE tree: {exc}") from None


def _slice(node: Node, position: int, level: list[Node], low: Bound | None,
           high: Bound | None) -> list[Any]:  # fmt: skip
    """The items of ``node`` that may hold keys in the range: the first inner node of a
    level is cut at ``low``, the last at ``high``, the ones between are taken whole.

    Child ``c`` of an inner node holds keys between separators ``c - 1`` and ``c``,
    both included, so keys equal to a bound may sit in several leaves: every leaf
    is cut at both bounds."""
    start, end = 0, len(node.items)
    if low is not None and (position == 0 or node.leaf):
        start = rank(low.left, node.keys, inclusive=node.leaf and not low.inclusive)
    if high is not None and (position == len(level) - 1 or node.leaf):
        end = rank(high.left, node.keys, inclusive=high.inclusive or not node.leaf)
        end += 0 if node.leaf else 1
    return node.items[start:end]


def _whole(doc: dict[str, Any]) -> bool:
    """Do a node document's items match its keys: one per key in a leaf, one more in an
    inner node?"""
    try:
        return len(doc["i"]) == len(doc["k"]) + (0 if doc["h"] == 0 else 1)
    except (KeyError, TypeError):
        return False


def _beyond(node: Node, left: bytes) -> bool:
    """Does the key of ``left`` belong right of ``node`` (above its fence)?"""
    return node.fence is not None and rank(left, [node.fence], inclusive=False) == 1


def _at_or_above(bound: Bound, fence: bytes | None) -> bool:
    """May keys at ``fence`` and beyond still be in a range ending at ``bound``?"""
    return fence is None or rank(bound.left, [fence], inclusive=True) == 1


def _pieces(node: Node) -> tuple[list[Node], list[bytes]]:
    """``node`` cut into pieces of at most ``CAPACITY`` keys (at least two; the first
    keeps its id), chained left to right, and the separators between them.

    A leaf's separator is the next piece's first key (it stays there); an inner
    node's is the key between two pieces, which moves up and leaves both."""
    keys, items, count = node.keys, node.items, max(2, -(-len(node.keys) // CAPACITY))
    ids = [node.id] + [_fresh_id() for _ in range(count - 1)]
    cuts = [round(i * len(keys) / count) for i in range(count + 1)]
    if node.leaf:
        parts = [(keys[a:b], items[a:b]) for a, b in itertools.pairwise(cuts)]
        separators = [keys[c] for c in cuts[1:-1]]
    else:  # cut i is the index of the key that moves up (cuts[0] = -1 before the first)
        cuts = [-1, *cuts[1:-1], len(keys)]
        parts = [(keys[a + 1 : b], items[a + 1 : b + 1]) for a, b in itertools.pairwise(cuts)]
        separators = [keys[c] for c in cuts[1:-1]]
    fences = [*separators, node.fence]
    nexts = [*ids[1:], node.next]
    pieces = [
        Node(ids[i], 0, node.level, part_keys, part_items, nexts[i], fences[i])
        for i, (part_keys, part_items) in enumerate(parts)
    ]
    pieces[0].version = node.version
    return pieces, separators


def _dedupe(level: list[Node]) -> list[Node]:
    """``level`` without repeats (two parents read at different times may share a child)."""
    seen: set[str] = set()
    out: list[Node] = []
    for node in level:
        if node.id not in seen:
            seen.add(node.id)
            out.append(node)
    return out


def claim_id(node_id: str, version: int, generation: int = 0) -> str:
    """The claims ``_id`` giving the right to write ``version`` of ``node_id``: ``id@v``,
    then ``id@v|g`` for the generations that take over a claim left standing."""
    return f"{node_id}@{version}" + (f"|{generation}" if generation else "")


def _fresh_id() -> str:
    return os.urandom(8).hex()
