"""Properties of RND (round trip, randomisation) and SEARCH (no missed word)."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from veil.crypto.rnd import OVERHEAD, Rnd
from veil.crypto.search import Search, search_match, tokenize
from veil.sql.prefilter_like import like_pattern_words

pytestmark = pytest.mark.property

RND = Rnd(bytes(range(32)), context=b"t.c", column="t.c")
SEARCH = Search(bytes(range(32, 64)), column="t.text")

values = st.lists(st.one_of(st.none(), st.binary(max_size=64)), max_size=40)
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


def _chunked(items: list[bytes | None], cuts: list[int]) -> pa.ChunkedArray:
    bounds = sorted({0, len(items), *(c % (len(items) + 1) for c in cuts)})
    chunks = [pa.array(items[a:b], pa.binary()) for a, b in itertools.pairwise(bounds)]
    return pa.chunked_array(chunks, pa.binary())


@given(values)
def test_rnd_round_trip_keeps_values_and_nulls(items: list[bytes | None]) -> None:
    sealed = RND.encrypt(pa.array(items, pa.binary()))
    assert [None if s is None else len(s) - OVERHEAD for s in sealed.to_pylist()] == [
        None if v is None else len(v) for v in items
    ]
    assert RND.decrypt(sealed).to_pylist() == items


@given(values, st.integers(0, 40), st.integers(0, 40))
def test_rnd_on_slices(items: list[bytes | None], start: int, length: int) -> None:
    array = pa.array(items, pa.binary()).slice(start, length)
    assert RND.decrypt(RND.encrypt(array)).to_pylist() == array.to_pylist()


@given(values, st.lists(st.integers(0, 40), max_size=3))
def test_rnd_on_chunked_arrays(items: list[bytes | None], cuts: list[int]) -> None:
    chunked = _chunked(items, cuts)
    sealed = RND.encrypt(chunked)
    assert sealed.num_chunks == chunked.num_chunks
    assert RND.decrypt(sealed).to_pylist() == items


@given(st.binary(max_size=40))
def test_rnd_randomises_equal_plaintexts(value: bytes) -> None:
    first, second = RND.encrypt(pa.array([value, value], pa.binary())).to_pylist()
    assert first != second
    assert RND.decrypt_one(first) == RND.decrypt_one(second) == value


@given(st.lists(st.one_of(st.none(), texts), min_size=1, max_size=12))
def test_search_finds_every_word_of_every_row(rows: list[str | None]) -> None:
    stored = SEARCH.encrypt(pa.array(rows, pa.string()))
    for word in {w for row in rows if row for w in tokenize(row)}:
        expected = [None if row is None else word in tokenize(row) for row in rows]
        assert search_match(stored, SEARCH.token(word)).to_pylist() == expected


@given(st.one_of(texts, st.from_regex(r"[A-Za-z0-9 ,.!-]{0,40}", fullmatch=True)))
def test_search_matches_the_words_in_other_cases(text: str) -> None:
    stored = SEARCH.encrypt(pa.array([text]))
    for word in tokenize(text):
        spellings = [word, word.upper(), word.title()] if word.isascii() else [word]
        for spelling in spellings:
            assert search_match(stored, SEARCH.token(spelling)).to_pylist() == [True]


@given(texts, st.from_regex(r"[a-z]{1,12}", fullmatch=True))
def test_search_does_not_match_absent_words(text: str, word: str) -> None:
    assume(word not in tokenize(text))
    stored = SEARCH.encrypt(pa.array([text]))
    assert search_match(stored, SEARCH.token(word)).to_pylist() == [False]


@given(texts)
def test_tokens_are_words_and_tokenising_a_word_gives_it_back(text: str) -> None:
    for word in tokenize(text):
        assert tokenize(word) == [word]
        assert len(SEARCH.token(word)) == 33


@given(texts, st.integers(0, 60), st.integers(0, 60))
def test_like_pattern_words_never_miss_a_match(text: str, start: int, stop: int) -> None:
    # Any substring of a text, wrapped in %...%, is a pattern the text matches:
    # every word like_pattern_words returns must then be a word of the text.
    # (A substring holding a wildcard is no such pattern: dropping the wildcard
    # would join its neighbours, ':0%0:' -> '%:00:%'.)
    part = text[start:stop]
    assume("%" not in part and "_" not in part)
    pattern = "%" + part + "%"
    assert set(like_pattern_words(pattern)) <= set(tokenize(text))
    anchored = text.replace("%", " ").replace("_", " ")
    assert like_pattern_words(anchored) == list(dict.fromkeys(tokenize(anchored)))
