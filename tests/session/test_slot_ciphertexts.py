"""A session keeps the DET ciphertexts of the values its templates bound (issue 41).

pgbench binds one account key to its UPDATE and then its SELECT, and the same
10 branch and 100 teller keys over and over: each was encrypted again every
time. DET gives a value one ciphertext under one cipher, so the session keeps
them by cipher; two columns under different keys holding the same values must
still get their own ciphertexts, and a full memo starts again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from veil import statements
from veil.session import session as session_module
from veil.session.session import Session
from veil_dev.bench.oltp import empty_client_dir

pytestmark = pytest.mark.integration

ROWS = [(k, k % 3, 10 * k) for k in range(1, 13)]  # a = k, b = k % 3: equal values overlap


@pytest.fixture
def session(backend_url: str, tmp_path: Path) -> Iterator[Session]:
    opened = Session(empty_client_dir(tmp_path / "client", backend_url))
    statements.run(opened, "CREATE TABLE t (a INT PRIMARY KEY, b INT, v INT) WITH (det = 'b')")
    values = ", ".join(f"({a}, {b}, {v})" for a, b, v in ROWS)
    opened.run(f"INSERT INTO t VALUES {values}")
    yield opened
    opened.close()


def _answers(session: Session, rounds: int) -> None:
    """Point queries on both DET columns, each value bound many times, as plaintext."""
    for _ in range(rounds):
        for key in (1, 2, 3, 5, 12, 13):
            by_a = session.run("SELECT v FROM t WHERE a = ?", [key]).table.column(0).to_pylist()
            assert by_a == [v for a, _, v in ROWS if a == key]
            by_b = session.run("SELECT v FROM t WHERE b = ?", [key % 4])
            want = sorted(v for _, b, v in ROWS if b == key % 4)
            assert sorted(by_b.table.column(0).to_pylist()) == want


def test_repeated_values_answer_from_kept_ciphertexts(session: Session) -> None:
    _answers(session, 3)
    kept = session._det_slots
    assert kept, "the templates' DET slots were not kept"
    # one ciphertext a value and cipher: the two columns' keys differ, so equal values
    # bound to each are kept apart, and never share a ciphertext
    by_cipher: dict[int, dict[object, object]] = {}
    for (cipher, _, value), (_, made) in kept.items():
        by_cipher.setdefault(cipher, {})[value] = made
    assert len(by_cipher) == 2
    first, second = by_cipher.values()
    shared = set(first) & set(second)
    assert shared and all(first[v] != second[v] for v in shared)


def test_a_full_memo_starts_again(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "_DET_SLOTS_KEPT", 2)
    _answers(session, 2)
    assert len(session._det_slots) <= 2


def test_an_update_by_key_reads_and_writes_the_right_rows(session: Session) -> None:
    """The write's match binds its key through the same memo (pgbench's shape)."""
    for _ in range(3):
        for key in (2, 5, 2):
            session.run("UPDATE t SET v = v + ? WHERE a = ?", [1, key])
    found = session.run("SELECT a, v FROM t WHERE a IN (2, 5) ORDER BY a").table.to_pylist()
    assert found == [{"a": 2, "v": 20 + 6}, {"a": 5, "v": 50 + 3}]
