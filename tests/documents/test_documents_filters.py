"""Server filters: clauses side by side in one document where they can be, else ``$and``;
both match the same documents on the server."""

from __future__ import annotations

import pytest

from veil.documents.query import conjunction

CLAUSES = [
    [{"a": 1}, {"b": {"$gte": 2}}],
    [{"a": 1}, {"a": 1}, {"b": 3}],
    [{"a": {"$gte": 1}}, {"a": {"$lt": 3}}],
    [{"$or": [{"a": 1}, {"b": 1}]}, {"$or": [{"a": 2}, {"b": 3}]}],
    [{"a": [1, 2]}, {"c": {"$exists": False}}],
    [],
]


def test_clauses_side_by_side_unless_two_name_a_field_differently():
    assert conjunction(CLAUSES[0]) == {"a": 1, "b": {"$gte": 2}}
    assert conjunction(CLAUSES[1]) == {"a": 1, "b": 3}
    assert conjunction(CLAUSES[2]) == {"$and": CLAUSES[2]}
    assert conjunction(CLAUSES[3]) == {"$and": CLAUSES[3]}
    assert conjunction([]) == {}


@pytest.mark.parametrize("clauses", CLAUSES, ids=[str(c)[:50] for c in CLAUSES])
def test_a_conjunction_matches_what_and_matches(plain, clauses):
    documents = [
        {"_id": i, "a": a, "b": b, **({"c": 0} if i % 3 == 0 else {})}
        for i, (a, b) in enumerate((a, b) for a in (0, 1, 2, [1, 2], [2, 5]) for b in (1, 2, 3))
    ]
    plain.filters.insert_many(documents)
    conjunct = {"$and": clauses} if clauses else {}
    want = sorted(d["_id"] for d in plain.filters.find(conjunct))
    assert sorted(d["_id"] for d in plain.filters.find(conjunction(clauses))) == want
