"""``index`` fields under ``"scheme": "ore"``: stored forms and server filters.

A value is stored as ``{"s": AES-GCM(value), "k": tag}`` (strings add the
equality hash ``"e"``), and the field's B+-tree (:mod:`veil.documents.oretree`)
gets the entry (right ciphertext of the value's order key, sealed tag). A
filter on the field walks the tree and becomes a filter on tags. Before ->
after, for ``year`` an ``int`` ``ore`` index::

    {"year": {"$gte": 1980, "$lt": 1990}}
      -> tree walk [1980, 1990) -> {"f3a1b2c4d.k": {"$in": [tag, tag, ...]}}   exact
    {"year": {"$ne": 1988}}
      -> tree walk [1988, 1988] -> {"f3a1b2c4d.k": {"$nin": [tag, ...]}}       exact

The bounds of a filter are walked together, as one range (an ``ore`` field
holds scalars, so one value meets them all). Strings and decimals have
many-to-one order keys: their ranges are widened to whole keys and
re-checked by the client, as under OPE. A walk that finds more than
``MAX_TAGS`` entries is not sent: the client filters that field instead.
"""

from __future__ import annotations

from typing import Any

from veil.documents.errors import FieldTypeError
from veil.documents.ore import OreKeys, fresh_tags
from veil.documents.oretree import Bound, OreTree
from veil.documents.schema import FieldSpec
from veil.documents.values import order_key

#: Tags one filter may send; beyond, the field is filtered on the client.
MAX_TAGS = 100_000
LOWER = ("$gt", "$gte")
UPPER = ("$lt", "$lte")


class OreIndex:
    """One ``ore`` field: its keys and, once the collection attaches it, its tree."""

    def __init__(self, keys: OreKeys, spec: FieldSpec):
        self.keys = keys
        self.spec = spec
        self.tree: OreTree | None = None

    @property
    def exact(self) -> bool:
        """Whether order keys are one-to-one (ints, datetimes), so walks are exact."""
        return self.spec.type in ("int", "datetime")

    def _tree(self) -> OreTree:
        assert self.tree is not None, "the collection attaches the tree"
        return self.tree

    # -- writing -----------------------------------------------------------------

    def tag_values(self, values: list[Any]) -> list[Any]:
        """A fresh tag per non-null value, after adding its entry to the tree."""
        present = [v for v in values if v is not None]
        for value in present:
            if isinstance(value, list):
                raise FieldTypeError(
                    f"field {self.spec.path!r} is an ore index: it holds single values, "
                    "not arrays (an ope index holds arrays)"
                )
        keys = [order_key(self.spec, v) for v in present]
        tags = fresh_tags(len(keys))
        if keys:
            order = sorted(range(len(keys)), key=keys.__getitem__)
            ordered = [keys[j] for j in order]
            self._tree().insert_sorted(
                self.keys.right(ordered),
                self.keys.seal_tags([tags[j] for j in order]),
                lambda positions: self.keys.left([ordered[i] for i in positions]),
            )
        found = iter(tags)
        return [None if v is None else next(found) for v in values]

    # -- reading -----------------------------------------------------------------

    def tags_between(self, low: tuple[Any, bool] | None, high: tuple[Any, bool] | None) -> Any:
        """The tags of stored values in a range of plaintext bounds ((value, inclusive) or
        None); None if there are more than ``MAX_TAGS``."""
        bounds = [self._bound(b) for b in (low, high)]
        sealed = self._tree().range(bounds[0], bounds[1])
        if len(sealed) > MAX_TAGS:
            return None
        return self.keys.open_tags(sealed)

    def _bound(self, bound: tuple[Any, bool] | None) -> Bound | None:
        if bound is None:
            return None
        value, inclusive = bound
        left = self.keys.left([order_key(self.spec, value)])[0]
        return Bound(left, inclusive or not self.exact)  # many-to-one keys: widen

    def equal_tags(self, values: list[Any]) -> Any:
        """Tags of stored values equal to any of ``values`` (null: the null literal)."""
        tags: list[Any] = []
        for value in values:
            if value is None:
                tags.append(None)
                continue
            found = self.tags_between((value, True), (value, True))
            if found is None:
                return None
            tags.extend(found)
        return tags
