"""The typed plans of finds and groups, made without a server: what goes to the server,
what the client finishes, and that a plan cannot be changed once made."""

from __future__ import annotations

import dataclasses

import pytest

from veil.crypto.keys import MasterKey
from veil.documents.codec import DocumentCodec
from veil.documents.findplan import plan_find
from veil.documents.groupplan import Output, plan_group
from veil.documents.schema import load_schema

SCHEMA = {"year": "index", "title": {"attr": "index", "type": "string"}, "n": "h_add"}


@pytest.fixture(scope="module")
def codec() -> DocumentCodec:
    return DocumentCodec(MasterKey.generate(), "db/films", load_schema(SCHEMA))


def test_an_exact_find_sends_skip_and_limit_to_the_server(codec):
    plan = plan_find(codec, "c1", {"year": {"$gte": 1980}}, None, (("year", 1),), 2, 5)
    year = codec.ciphers["year"]
    assert plan.server.filter == {year.order_path: {"$gte": year.order_ciphertext(1980)}}
    assert (plan.server.sort, plan.server.skip, plan.server.limit) == (((year.name, 1),), 2, 5)
    assert plan.client.filter is None and plan.client.streams


def test_an_inexact_find_leaves_the_filter_skip_and_limit_to_the_client(codec):
    query = {"title": {"$gt": "M"}}
    plan = plan_find(codec, "c1", query, {"year": 1}, (), 0, 5)
    assert (plan.server.skip, plan.server.limit, plan.server.projection) == (0, 0, None)
    assert plan.client.filter == query and plan.client.limit == 5 and not plan.client.streams
    assert plan.explain()["client"] == {
        "filter": query, "sort": None, "skip": 0, "limit": 5, "projection": {"year": 1},
    }  # fmt: skip


def test_a_client_sort_fetches_its_keys_and_shows_as_a_list(codec):
    """A string's order ciphertext is its prefix's: the server's order is a first cut."""
    title = codec.ciphers["title"]
    plan = plan_find(codec, "c1", {}, {"n": 1}, (("title", -1),), 0, 0)
    assert plan.server.sort == ((title.order_path, -1),) and plan.client.sort == (("title", -1),)
    assert title.name in plan.server.projection  # fetched to sort by, projected away after
    assert plan.explain()["client"]["sort"] == [("title", -1)]


def test_plans_are_immutable(codec):
    find = plan_find(codec, "c1", {}, None, (), 0, 0)
    group = plan_group(codec, {}, {"_id": "$year", "s": {"$sum": "$n"}})
    assert group is not None
    for frozen, field in [(find, "server"), (find.client, "limit"), (group, "stage")]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(frozen, field, None)


def test_a_group_the_server_can_compute(codec):
    year, n = codec.ciphers["year"], codec.ciphers["n"]
    plan = plan_group(codec, {}, {"_id": "$year", "s": {"$sum": "$n"}, "c": {"$count": {}}})
    assert plan is not None
    assert plan.stage == {
        "_id": f"${year.order_path}",
        "s_l": {"$sum": f"${n.name}"}, "s_h": {"$sum": f"${n.name}h"},
        "c": {"$sum": 1},
    }  # fmt: skip
    assert plan.outputs == (Output("s", "sum", n), Output("c", "count", None))
    assert plan.keys.single and plan.keys.paths == ("year",) and not plan.fetched
    assert plan.keys.plain(year.order_ciphertext(1999)) == 1999


def test_a_group_the_server_cannot_compute_is_left_to_the_client(codec):
    assert plan_group(codec, {}, {"_id": "$title", "s": {"$sum": "$n"}}) is None  # not 1-to-1
    assert plan_group(codec, {}, {"_id": None, "m": {"$max": "$n"}}) is None
