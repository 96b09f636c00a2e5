"""``dialect.split``: the statements of a simple-protocol string, with and without tokenizing."""

import pytest

from veil.serve import dialect
from veil.serve.errors import WireError

SPLITS = [
    ("SELECT 1", ["SELECT 1"]),
    ("  SELECT 1 ;  ", ["SELECT 1"]),
    ("BEGIN;", ["BEGIN"]),
    (";", []),
    ("  ", []),
    ("SELECT 1; SELECT 2;", ["SELECT 1", "SELECT 2"]),
    ("SELECT ';' AS s;", ["SELECT ';' AS s"]),
    ("SELECT 1 -- no end;", ["SELECT 1 -- no end"]),
    ("SELECT 1;;", ["SELECT 1"]),
    ("UPDATE t SET a = a + -5 WHERE k = 7;\n", ["UPDATE t SET a = a + -5 WHERE k = 7"]),
]


@pytest.mark.parametrize(("sql", "statements"), SPLITS)
def test_split(sql: str, statements: list[str]) -> None:
    assert dialect.split(sql) == statements


@pytest.mark.parametrize(("sql", "statements"), SPLITS)
def test_fast_path_equals_the_tokenizer(sql: str, statements: list[str]) -> None:
    """A text with a second statement after it goes through the tokenizer: the one
    statement comes out of it as it does alone."""
    if statements and "--" not in sql:  # a line comment would take the second one in
        assert (
            dialect.split(sql.rstrip().rstrip(";") + "; SELECT 0")[: len(statements)] == statements
        )


def test_an_unterminated_string_still_fails() -> None:
    with pytest.raises(WireError):
        dialect.classify(dialect.split("SELECT 'a;")[0])
