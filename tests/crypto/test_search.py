"""Behaviour of SEARCH: tokenisation, formats, tokens, matching and its errors."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from veil.crypto.keys import MasterKey
from veil.crypto.search import (
    TOKEN_BYTES,
    VERSION,
    WORD_BYTES,
    Search,
    search_match,
    tokenize,
)
from veil.errors import DomainError, MalformedCiphertextError, ParameterError
from veil.sql.prefilter_like import like_pattern_words

pytestmark = pytest.mark.unit

KEY = bytes(range(32))


@pytest.fixture
def search() -> Search:
    return Search(KEY, column="docs.body")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", []),
        ("   ", []),
        ("Hello, World!", ["hello", "world"]),
        ("e-mail_address@example.com", ["e", "mail", "address", "example", "com"]),
        ("R2-D2 and C3PO", ["r2", "d2", "and", "c3po"]),
        ("ÜBER straße", ["über", "straße"]),
        ("東京タワー 123", ["東京タワー", "123"]),
        ("İstanbul", ["istanbul"]),
        ("ΟΔΟΣ οδος", ["οδοσ", "οδος"]),
        ("tab\tnew\nline", ["tab", "new", "line"]),
        ("½ ⅓", ["½", "⅓"]),
        ("emoji🙂between", ["emoji", "between"]),
        ("a a A", ["a", "a", "a"]),
    ],
)
def test_tokenize(text: str, words: list[str]) -> None:
    assert tokenize(text) == words


def test_rows_hold_one_ciphertext_per_distinct_word(search: Search) -> None:
    stored = search.encrypt(pa.array(["the cat and the CAT", "", None]))
    assert stored.type == pa.binary()
    first, empty, null = stored.to_pylist()
    assert first[0] == VERSION and len(first) == 1 + 3 * WORD_BYTES
    assert empty == bytes([VERSION])
    assert null is None


def test_matching_finds_whole_words_in_any_case(search: Search) -> None:
    stored = search.encrypt(pa.array(["The Cat sat.", "concatenate", None, "", "cat-flap"]))
    assert search_match(stored, search.token("CAT")).to_pylist() == [
        True, False, None, False, True,
    ]  # fmt: skip
    assert search_match(stored, search.token("dog")).to_pylist() == [
        False, False, None, False, False,
    ]  # fmt: skip


def test_sliced_and_chunked_ciphertexts(search: Search) -> None:
    stored = search.encrypt(pa.array(["x", "y", None, "x y"]))
    token = search.token("x")
    assert search_match(stored.slice(1), token).to_pylist() == [False, None, True]
    chunked = pa.chunked_array([stored.slice(0, 1), stored.slice(1)])
    assert search_match(chunked, token).to_pylist() == [True, False, None, True]
    assert search_match(pa.chunked_array([], pa.binary()), token).to_pylist() == []


def test_a_token_column_as_a_duckdb_udf_passes_it(search: Search) -> None:
    stored = search.encrypt(pa.array(["x", "y", "x", None]))
    x, y = search.token("x"), search.token("y")
    tokens = pa.array([x, x, None, y], pa.binary())
    assert search_match(stored, tokens).to_pylist() == [True, False, None, None]
    with pytest.raises(ParameterError, match="differ in length"):
        search_match(stored, tokens.slice(1))


def test_numpy_in_gives_numpy_out(search: Search) -> None:
    stored = search.encrypt(np.array(["a b", None], dtype=object))
    assert isinstance(stored, np.ndarray) and stored[1] is None


def test_tokens_of_another_key_match_nothing(search: Search) -> None:
    stored = search.encrypt(pa.array(["secret word"]))
    other = Search(bytes(32))
    assert search_match(stored, other.token("secret")).to_pylist() == [False]


def test_equal_texts_are_stored_differently(search: Search) -> None:
    stored = search.encrypt(pa.array(["same text", "same text"])).to_pylist()
    assert stored[0] != stored[1]
    assert set(_words(stored[0])).isdisjoint(_words(stored[1]))


def test_a_token_is_for_exactly_one_word(search: Search) -> None:
    assert len(search.token("Word")) == TOKEN_BYTES
    assert search.token("Word") == search.token("word")
    for bad in ["", "two words", "word.", " word"]:
        with pytest.raises(ParameterError, match="exactly one word"):
            search.token(bad)


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        (b"", "empty"),
        (bytes([VERSION]) + bytes(15), "whole number"),
        (b"\x02" + bytes(16), "version byte 0x02"),
    ],
)
def test_malformed_stored_values(search: Search, stored: bytes, reason: str) -> None:
    with pytest.raises(MalformedCiphertextError, match=reason):
        search_match(pa.array([stored], pa.binary()), search.token("w"))


def test_malformed_tokens_and_keys() -> None:
    stored = pa.array([bytes([VERSION])], pa.binary())
    with pytest.raises(ParameterError, match="not a SEARCH token"):
        search_match(stored, b"\x01" + bytes(16))
    with pytest.raises(ParameterError, match="32 bytes"):
        Search(b"short")


def test_text_that_is_not_utf8_is_refused(search: Search) -> None:
    with pytest.raises(DomainError, match=r"docs\.body.*UTF-8 text"):
        search.encrypt(pa.array([b"\xff\xfe"], pa.binary()))


def test_from_master_separates_scopes() -> None:
    master = MasterKey(bytes(32))
    stored = Search.from_master(master, "docs.body").encrypt(pa.array(["word"]))
    same = Search.from_master(master, "docs.body").token("word")
    other = Search.from_master(master, "docs.title").token("word")
    assert search_match(stored, same).to_pylist() == [True]
    assert search_match(stored, other).to_pylist() == [False]
    assert KEY.hex() not in repr(Search(KEY))


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("%cat%", []),
        ("%big cat%", []),
        ("% big cat %", ["big", "cat"]),
        ("%the big cat%", ["big"]),
        ("cat%", []),
        ("%cat", []),
        ("The cat", ["the", "cat"]),
        ("the_cat", []),
        ("a-b%", ["a"]),
        ("%(x) y%", ["x"]),
        ("%x x%", []),
        ("% x x %", ["x"]),
        (r"%a\%b c%", []),
        ("%a!%b c%", ["b"]),
        ("", []),
    ],
)
def test_like_pattern_words(pattern: str, words: list[str]) -> None:
    escape = "!" if "!" in pattern else None
    assert like_pattern_words(pattern, escape=escape) == words


def test_like_tokens_prefilter_without_missing_rows(search: Search) -> None:
    texts = pa.array(["the big cat", "a big cat!", "big catalogue", "cat big", None])
    stored = search.encrypt(texts)
    tokens = [search.token(w) for w in like_pattern_words("% big cat%")]
    assert tokens == [search.token("big")]
    assert search_match(stored, tokens[0]).to_pylist() == [True, True, True, True, None]
    assert like_pattern_words("%cat%") == []


def _words(stored: bytes) -> list[bytes]:
    return [stored[i : i + WORD_BYTES] for i in range(1, len(stored), WORD_BYTES)]
