"""Run-time filters rendered once per shape (``veil.sql.remote.marked``,
``veil.exec.server.run_filtered``): the values differ, the text does not."""

from __future__ import annotations

from sqlglot import exp

from veil.sql.remote import Marker, marked, numbered, param


def _keys(values: list[int]) -> exp.Expr:
    return exp.column("c").isin(query=exp.select(exp.Unnest(expressions=[param(values)])))


def test_one_shape_two_runs():
    first, values, copies = marked([_keys([1, 2]), exp.false()])
    second, other, _ = marked([_keys([7]), exp.false()])
    assert first == second and values == [[1, 2]] and other == [[7]]
    statement, held = numbered(exp.select("x").from_("t").where(copies[0]))
    assert [type(v) for v in held] == [Marker] and held[0].index == 0
    assert "$1" in statement.sql(dialect="duckdb") or "?" in statement.sql()


def test_marking_leaves_the_filters_as_they_were():
    predicate = _keys([3])
    marked([predicate])
    _, held = numbered(exp.select("x").from_("t").where(predicate))
    assert held == [[3]]


def test_other_shapes_differ():
    ranges = exp.Between(this=exp.column("c"), low=param(1), high=param(2))
    assert marked([_keys([1])])[0] != marked([exp.false()])[0] != marked([ranges])[0]
    assert marked([ranges])[1] == [1, 2]
