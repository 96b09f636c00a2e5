"""Prepared point queries the wire server answers without Python (``veil.serve.native``).

Each answer must be the one the session gives: every type a native plan
writes, NULLs, the extremes of each type, values a plan does not take (they
fall back), a failed transaction, a table made anew under a kept plan, and
no plaintext in what the server receives.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import random
import re
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from veil._native import WireServer
from veil.serve import native
from veil.serve.engine import Engine
from veil_dev.bench.oltp import empty_client_dir
from veil_dev.servers.postgres import ThrowawayCluster

pytestmark = pytest.mark.integration

TABLE = (
    "CREATE TABLE acc (aid INT NOT NULL PRIMARY KEY, big BIGINT, small SMALLINT, "
    "bal INT, price DECIMAL(10,2), wide DECIMAL(18,4), day DATE, name VARCHAR(40), "
    "note TEXT, code CHAR(6))"
)
COLUMNS = ["aid", "big", "small", "bal", "price", "wide", "day", "name", "note", "code"]


class Served:
    def __init__(self, client: Path, monkeypatch: pytest.MonkeyPatch, *, audit: bool = False):
        self.points: list[Any] = []
        made = native.points_for

        def kept(session: Any, engine: Any) -> Any:
            points = made(session, engine)
            if points is not None:
                self.points.append(points)
            return points

        monkeypatch.setattr(native, "points_for", kept)
        self.engine = Engine(client, audit=audit)
        self.server = WireServer(self.engine, "127.0.0.1:0", None, None, True)
        port = self.server.address.rsplit(":", 1)[1]
        self.dsn = f"host=127.0.0.1 port={port} user=bench dbname=veil"

    @property
    def runs(self) -> int:
        return sum(p.runs for p in self.points)

    def stop(self) -> None:
        self.server.stop()
        self.engine.close()


@pytest.fixture
def served(postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    found = Served(empty_client_dir(tmp_path / "client", postgres_url), monkeypatch)
    try:
        yield found
    finally:
        found.stop()


def _rows(count: int, seed: int) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    words = ["", "a", "ünïcödé ✓", "x" * 40, "O'Brien", "tab\there", "line\nbreak"]
    rows: list[tuple[Any, ...]] = []
    for aid in range(1, count + 1):
        rows.append(
            (
                aid,
                rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randint(-(2**62), 2**62)]),
                rng.choice([0, -(2**15), 2**15 - 1, rng.randint(-999, 999)]),
                rng.choice([-(2**31), 2**31 - 1, rng.randint(-5000, 5000)]),
                Decimal(rng.randint(-(10**10) + 1, 10**10 - 1)) / 100,
                Decimal(rng.randint(-(10**18) + 1, 10**18 - 1)) / 10**4,
                rng.choice([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2000, 2, 29)])
                if aid % 3 == 0
                else dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-30000, 30000)),
                rng.choice(words),
                rng.choice(words) * rng.randint(1, 3),
                rng.choice(["abc", "", "zzzzzz"]),
            )
        )
    rows.append((count + 1, *([None] * (len(COLUMNS) - 1))))
    return rows


def _load(con: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> None:
    con.execute(TABLE)
    marks = ", ".join(["%s"] * len(COLUMNS))
    with con.transaction():
        for row in rows:
            con.execute(f"INSERT INTO acc VALUES ({marks})", row)


def _warmed(con: psycopg.Connection[Any], query: str, seed: int, count: int = 20) -> int:
    """A table loaded and ``query`` prepared once for each of its keys: native from then."""
    _load(con, _rows(count, seed))
    for key in range(1, count + 1):
        con.execute(query, [key], prepare=True).fetchall()
    return count


def test_point_reads_match_what_was_written(served: Served) -> None:
    rows = _rows(60, seed=7)
    by_key = {row[0]: row for row in rows}
    with psycopg.connect(served.dsn, autocommit=True) as con:
        _load(con, rows)
        got_code = con.execute("SELECT code FROM acc WHERE aid = 1").fetchone()
        assert got_code is not None  # CHAR(n) as the session writes it, whatever that is
        for query, columns in [
            ("SELECT * FROM acc WHERE aid = %s", COLUMNS),
            ("SELECT bal FROM acc WHERE aid = %s", ["bal"]),
            (
                "SELECT name, day, price, big FROM acc WHERE aid = %s",
                ["name", "day", "price", "big"],
            ),
        ]:
            at = [COLUMNS.index(c) for c in columns]
            for key in [*by_key, *by_key]:  # twice: planned, verified, then native
                got = con.execute(query, [key], prepare=True).fetchall()
                want = by_key[key]
                session = con.execute(query.replace("%s", str(key))).fetchall()
                assert got == session, (query, key)
                expected = tuple(want[i] for i in at)
                if "code" not in columns:
                    assert got == [expected], (query, key)
    assert served.runs > 100, "the prepared point reads were not answered natively"


def test_values_a_plan_does_not_take_fall_back(served: Served) -> None:
    with psycopg.connect(served.dsn, autocommit=True) as con:
        query = "SELECT bal, name FROM acc WHERE aid = %s"
        _warmed(con, query, seed=3)
        runs = served.runs
        assert runs > 0
        assert con.execute(query, [2**40], prepare=True).fetchall() == []  # BIGINT: no INT key
        assert con.execute(query, [None], prepare=True).fetchall() == []
        want = con.execute(query, [5], prepare=True).fetchall()
        with con.cursor() as cur:  # the key as text: another statement's parameter type
            cur.execute("SELECT bal, name FROM acc WHERE aid = %s::int", ["5"], prepare=True)
            assert cur.fetchall() == want
        assert con.execute(query, [99], prepare=True).fetchall() == []
        assert served.runs > runs


def test_a_failed_transaction_refuses_them(served: Served) -> None:
    with psycopg.connect(served.dsn, autocommit=True) as con:
        query = "SELECT bal FROM acc WHERE aid = %s"
        _warmed(con, query, seed=5)
        runs = served.runs
        con.execute("BEGIN")
        con.execute(query, [3], prepare=True).fetchall()
        assert served.runs == runs + 1
        with pytest.raises(psycopg.Error):
            con.execute("SELECT 1 / 0 FROM acc WHERE aid = 1").fetchall()
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            con.execute(query, [3], prepare=True).fetchall()
        con.execute("ROLLBACK")
        assert (
            con.execute(query, [3], prepare=True).fetchall()
            == con.execute("SELECT bal FROM acc WHERE aid = 3").fetchall()
        )
        assert served.runs >= runs + 2


def test_inside_a_transaction_they_see_its_writes(served: Served) -> None:
    with psycopg.connect(served.dsn, autocommit=True) as con:
        query = "SELECT bal FROM acc WHERE aid = %s"
        _warmed(con, query, seed=11)
        before = con.execute(query, [4], prepare=True).fetchone()
        assert before is not None
        runs = served.runs
        with con.transaction():
            con.execute("UPDATE acc SET bal = %s WHERE aid = %s", [1234, 4], prepare=True)
            assert con.execute(query, [4], prepare=True).fetchone() == (1234,)
            assert served.runs > runs
            raise psycopg.Rollback()
        assert con.execute(query, [4], prepare=True).fetchone() == before


def test_a_table_made_anew_is_read_anew(served: Served) -> None:
    query = "SELECT bal, name FROM acc WHERE aid = %s"
    with psycopg.connect(served.dsn, autocommit=True) as con:
        _warmed(con, query, seed=1)
        assert served.runs > 0
        with psycopg.connect(served.dsn, autocommit=True) as other:
            other.execute("DROP TABLE acc")
            _load(other, _rows(20, seed=2))
            fresh = {k: other.execute(query.replace("%s", str(k))).fetchall() for k in range(1, 21)}
        for key in range(1, 21):
            assert con.execute(query, [key], prepare=True).fetchall() == fresh[key]


def test_the_server_sees_no_plaintext(served: Served, postgres_cluster: ThrowawayCluster) -> None:
    canary_key, canary_name = 7_654_321, "canary-name-5417"
    rows = _rows(10, seed=9)
    rows[4] = (canary_key, 11, 12, 4_242_424, Decimal("1.25"), Decimal("2.5"), dt.date(2001, 2, 3),
               canary_name, "n", "c")  # fmt: skip
    with psycopg.connect(served.dsn, autocommit=True) as con:
        _load(con, rows)
        seen = len(postgres_cluster.read_log())
        query = "SELECT name, bal FROM acc WHERE aid = %s"
        for row in rows:
            con.execute(query, [row[0]], prepare=True).fetchall()
        runs = served.runs
        for _ in range(3):
            assert con.execute(query, [canary_key], prepare=True).fetchall() == [
                (canary_name, 4_242_424)
            ]
        assert served.runs >= runs + 3
    log = postgres_cluster.read_log()[seen:]
    assert "execute <unnamed>: SELECT c_" in log  # the native statements were logged
    for plaintext in (str(canary_key), canary_name, "4242424", "acc", "aid", "name", "bal"):
        assert not re.search(rf"\b{re.escape(plaintext)}\b", log), plaintext


# -- point UPDATEs --------------------------------------------------------------

UPDATE = "UPDATE acc SET bal = bal + %s WHERE aid = %s"


def _together(clients: list[Callable[[], None]], failures: list[BaseException]) -> None:
    """Each client on a thread of its own, all at once; none may have failed."""
    threads = [threading.Thread(target=client) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


def _balances(con: psycopg.Connection[Any]) -> dict[int, int | None]:
    return dict(con.execute("SELECT aid, bal FROM acc").fetchall())


def test_updates_in_transactions_write_what_the_session_would(served: Served) -> None:
    rows = _rows(40, seed=21)
    rows = [(r[0], r[1], r[2], r[3] // 4 if r[3] is not None else None, *r[4:]) for r in rows]
    rng = random.Random(5)
    with psycopg.connect(served.dsn, autocommit=True) as con:
        _load(con, rows)
        want = {r[0]: r[3] for r in rows}
        others = {r[0]: r for r in con.execute("SELECT * FROM acc").fetchall()}
        for _ in range(80):
            with con.transaction():
                for _ in range(3):
                    aid, delta = rng.randint(1, 41), rng.randint(-(2**20), 2**20)
                    done = con.execute(UPDATE, [delta, aid], prepare=True)
                    assert done.rowcount == 1
                    if want[aid] is not None:
                        want[aid] += delta
                    got = con.execute("SELECT bal FROM acc WHERE aid = %s", [aid], prepare=True)
                    assert got.fetchone() == (want[aid],)
        assert con.execute(UPDATE, [1, 999], prepare=True).rowcount == 0  # no such row
        assert _balances(con) == want
        after = {r[0]: r for r in con.execute("SELECT * FROM acc").fetchall()}
        for aid, row in after.items():  # every other column kept, moved to the new row ids
            assert row[:3] + row[4:] == others[aid][:3] + others[aid][4:]
    assert served.runs > 300, "the UPDATEs were not run natively"


def test_update_values_past_the_type_go_to_the_session(served: Served) -> None:
    with psycopg.connect(served.dsn, autocommit=True) as con:
        _load(con, _rows(20, seed=8))
        con.execute("UPDATE acc SET bal = 0 WHERE aid <= 20")
        for key in range(1, 21):
            with con.transaction():
                con.execute(UPDATE, [key, key], prepare=True)
        runs = served.runs
        con.execute("UPDATE acc SET bal = 2147483000 WHERE aid = 3")
        con.execute("BEGIN")
        with pytest.raises(psycopg.Error) as raised:
            con.execute(UPDATE, [10_000, 3], prepare=True)
        assert raised.value.sqlstate is not None
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            con.execute(UPDATE, [1, 4], prepare=True)
        con.execute("ROLLBACK")
        with con.transaction():
            con.execute(UPDATE, [5, 4], prepare=True)  # natively again
            con.execute(UPDATE, [5, 21], prepare=True)  # a NULL balance: the session's
        assert served.runs > runs
        assert _balances(con)[4] == 9 and _balances(con)[21] is None
        con.execute(UPDATE, [1, 4], prepare=True)  # autocommit
        assert _balances(con)[4] == 10


def test_concurrent_transfers_keep_the_total(served: Served) -> None:
    accounts, clients, transfers = 6, 6, 25
    with psycopg.connect(served.dsn, autocommit=True) as con:
        _load(con, _rows(accounts, seed=13))
        con.execute("UPDATE acc SET bal = 1000 WHERE aid <= %s" % (accounts + 1))
    failures: list[BaseException] = []

    def client(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with psycopg.connect(served.dsn, autocommit=True) as mine:
                done = 0
                while done < transfers:
                    a, b = rng.sample(range(1, accounts + 2), 2)
                    amount = rng.randint(1, 50)
                    try:
                        with mine.transaction():
                            mine.execute(UPDATE, [-amount, a], prepare=True)
                            mine.execute(UPDATE, [amount, b], prepare=True)
                        done += 1
                    except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected):
                        continue
        except BaseException as exc:  # reported below
            failures.append(exc)

    _together([functools.partial(client, i) for i in range(clients)], failures)
    with psycopg.connect(served.dsn, autocommit=True) as con:
        balances = _balances(con)
        assert len(balances) == accounts + 1
        assert sum(v for v in balances.values() if v is not None) == 1000 * (accounts + 1)
        count = con.execute("SELECT count(*), count(DISTINCT aid) FROM acc").fetchone()
        assert count == (accounts + 1, accounts + 1)
    assert served.runs > clients * transfers


def test_concurrent_increments_in_autocommit_lose_none(served: Served) -> None:
    clients, each = 4, 30
    with psycopg.connect(served.dsn, autocommit=True) as con:
        _load(con, _rows(4, seed=17))
        con.execute("UPDATE acc SET bal = 0 WHERE aid <= 5")
        for key in range(1, 6):  # the shape planned, verified and handed over
            con.execute(UPDATE, [0, key], prepare=True)
    runs = served.runs
    failures: list[BaseException] = []

    def client() -> None:
        try:
            with psycopg.connect(served.dsn, autocommit=True) as mine:
                for number in range(each):
                    mine.execute(UPDATE, [1, 1 + number % 2], prepare=True)
        except BaseException as exc:  # reported below
            failures.append(exc)

    _together([client] * clients, failures)
    with psycopg.connect(served.dsn, autocommit=True) as con:
        balances = _balances(con)
    assert balances[1] == balances[2] == clients * each // 2
    assert served.runs > runs + clients


def test_text_set_to_a_parameter(served: Served) -> None:
    rng = random.Random(23)
    with psycopg.connect(served.dsn, autocommit=True) as con:
        rows = _rows(20, seed=19)
        _load(con, rows)
        want = {r[0]: r[7] for r in rows}
        for _ in range(60):
            aid = rng.randint(1, 21)
            name = rng.choice(["", "ünï ✓", "x" * 40, f"n{rng.random()}"])
            con.execute("UPDATE acc SET name = %s WHERE aid = %s", [name, aid], prepare=True)
            want[aid] = name
        runs = served.runs
        con.execute("UPDATE acc SET name = %s WHERE aid = %s", ["last", 2], prepare=True)
        want[2] = "last"
        assert served.runs == runs + 1
        assert dict(con.execute("SELECT aid, name FROM acc").fetchall()) == want


def test_one_key_updated_again_and_again(served: Served) -> None:
    """pgbench at scale 1: one branch, its key always 1; the match is planned for it alone."""
    rng = random.Random(29)
    with psycopg.connect(served.dsn, autocommit=True) as con:
        _load(con, _rows(3, seed=31))
        con.execute("UPDATE acc SET bal = 0 WHERE aid = 2")
        total = 0
        for _ in range(40):
            delta = rng.randint(-5000, 5000)
            with con.transaction():
                con.execute(UPDATE, [delta, 2], prepare=True)
            total += delta
        runs = served.runs
        with con.transaction():
            con.execute(UPDATE, [7, 2], prepare=True)
            con.execute(UPDATE, [7, 3], prepare=True)  # another key: the session's
        assert served.runs == runs + 1
        assert _balances(con)[2] == total + 7


# -- one-row INSERTs --------------------------------------------------------------

HISTORY = (
    "CREATE TABLE hist (tid INT, bid INT, aid BIGINT, delta INT, mtime TIMESTAMP, "
    "note CHAR(4), label VARCHAR DEFAULT 'seen', amount DECIMAL(10,2) DEFAULT 1.5)"
)
INSERT = (
    "INSERT INTO hist (tid, bid, aid, delta, mtime, note) "
    "VALUES (%s, %s, %s, %s, CURRENT_TIMESTAMP, %s)"
)


def test_inserts_write_the_rows_given(served: Served) -> None:
    rng = random.Random(37)
    rows = [
        (rng.randint(1, 10), 1, rng.randint(1, 10**6), rng.randint(-5000, 5000), "n")
        for _ in range(60)
    ]
    rows += [(1, 1, 2**40, -(2**31), "ü✓"), (2, 2, -(2**40), 2**31 - 1, ""), (3, 3, 0, 0, "x")]
    with psycopg.connect(served.dsn, autocommit=True) as con:
        con.execute(HISTORY)
        before = con.execute("SELECT CAST(now() AS TIMESTAMP)").fetchone()
        assert before is not None
        for number, row in enumerate(rows):
            if number % 2:
                with con.transaction():
                    con.execute(INSERT, row, prepare=True)
            else:
                con.execute(INSERT, row, prepare=True)
        got = con.execute("SELECT tid, bid, aid, delta, note, mtime, label, amount FROM hist")
        found = got.fetchall()
    assert sorted(r[:5] for r in found) == sorted(rows)
    assert all(r[6:] == ("seen", Decimal("1.50")) for r in found)
    assert all(dt.timedelta(0) <= r[5] - before[0] < dt.timedelta(minutes=5) for r in found)
    assert served.runs > 40, "the INSERTs were not run natively"


def test_values_written_in(served: Served) -> None:
    """pgbench -M simple: the integers written into the text are the plan's parameters."""
    rng = random.Random(41)
    with psycopg.connect(served.dsn, autocommit=True) as con:
        _load(con, _rows(30, seed=43))
        con.execute("UPDATE acc SET bal = 0 WHERE aid <= 31")
        con.execute(HISTORY)
        want = dict.fromkeys(range(1, 32), 0)
        for _ in range(120):
            aid, delta = rng.randint(1, 31), rng.randint(-5000, 5000)
            with con.transaction():
                con.execute(f"UPDATE acc SET bal = bal + {delta} WHERE aid = {aid};")
                got = con.execute(f"SELECT bal FROM acc WHERE aid = {aid}").fetchone()
                con.execute(
                    f"INSERT INTO hist (tid, bid, aid, delta, mtime) "
                    f"VALUES (1, 2, {aid}, {delta}, CURRENT_TIMESTAMP)"
                )
            want[aid] += delta
            assert got == (want[aid],)
        assert _balances(con) == want
        total = con.execute("SELECT sum(delta), count(*) FROM hist").fetchone()
        assert total == (sum(want.values()), 120)
        assert con.execute("SELECT bal FROM acc WHERE aid = 2 LIMIT 5").fetchone() == (want[2],)
    assert served.runs > 200, "the statements were not answered natively"


def test_counts_by_key(served: Served) -> None:
    with psycopg.connect(served.dsn, autocommit=True) as con:
        rows = _rows(40, seed=47)
        _load(con, rows)
        query = "SELECT count(*) FROM acc WHERE aid = %s"
        for key in [*range(1, 42), 99, 0, -3]:
            got = con.execute(query, [key], prepare=True).fetchall()
            assert got == [(1 if 1 <= key <= 41 else 0,)]
        runs = served.runs
        with con.transaction():
            con.execute("DELETE FROM acc WHERE aid = 7")
            assert con.execute(query, [7], prepare=True).fetchall() == [(0,)]
            assert con.execute(query, [8], prepare=True).fetchall() == [(1,)]
        assert served.runs >= runs + 2


KILLED = """
import random, sys
import psycopg
con = psycopg.connect(sys.argv[1], autocommit=True)
rng = random.Random(3)
done = 0
while True:
    a, b = rng.sample(range(1, 9), 2)
    with con.transaction():
        con.execute("UPDATE acc SET bal = bal + %s WHERE aid = %s", [-1, a], prepare=True)
        con.execute("UPDATE acc SET bal = bal + %s WHERE aid = %s", [1, b], prepare=True)
    done += 1
    if done == 50:
        print("going", flush=True)
"""


def test_a_client_killed_between_its_updates(served: Served) -> None:
    """SIGKILL of a client in the middle of its transactions of native UPDATEs: its
    open transaction is undone, the total kept, every row there once, and another
    client's transactions go on (the killed one's table locks went with it)."""
    import signal
    import subprocess
    import sys
    import time

    with psycopg.connect(served.dsn, autocommit=True) as con:
        _load(con, _rows(7, seed=53))
        con.execute("UPDATE acc SET bal = 100 WHERE aid <= 8")
    command = [sys.executable, "-c", KILLED, served.dsn]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as worker:
        try:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "going"
            time.sleep(0.3)  # in the middle of some transaction
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait(30)
    assert served.runs > 50
    with psycopg.connect(served.dsn, autocommit=True) as con:
        for _ in range(5):  # another client goes on
            with con.transaction():
                con.execute(UPDATE, [-2, 1], prepare=True)
                con.execute(UPDATE, [2, 2], prepare=True)
        balances = _balances(con)
        assert sum(v for v in balances.values() if v is not None) == 800
        assert con.execute("SELECT count(*), count(DISTINCT aid) FROM acc").fetchone() == (8, 8)


def test_parameters_in_another_order(served: Served) -> None:
    """$2 before $1, and one parameter in two places: each value goes where it stands."""
    rng = random.Random(59)
    with psycopg.connect(served.dsn, autocommit=True) as con:
        _load(con, _rows(20, seed=61))
        con.execute("UPDATE acc SET bal = 0 WHERE aid <= 21")
        want = dict.fromkeys(range(1, 22), 0)
        cursor = psycopg.RawCursor(con)
        for _ in range(40):
            aid, delta = rng.randint(1, 21), rng.randint(-99, 99)
            cursor.execute(
                "UPDATE acc SET bal = bal + $2 WHERE aid = $1", [aid, delta], prepare=True
            )
            want[aid] += delta
            cursor.execute(
                "SELECT bal, aid FROM acc WHERE aid = $1 AND $1 > 0", [aid], prepare=True
            )
            assert cursor.fetchall() == [(want[aid], aid)]
        assert _balances(con) == want
    assert served.runs > 30  # the UPDATEs (the SELECT's ``$1 > 0`` keeps it the session's)


def test_statements_prepared_again_after_the_server_dropped_them(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Native statements are named server statements; psycopg's DEALLOCATE ALL (after a
    ROLLBACK, a DROP, an ALTER it runs on the session's connection) drops them, and each
    is prepared again before its next run, inside a transaction as outside."""
    backends: list[Any] = []
    made = native.points_for

    def kept(session: Any, engine: Any) -> Any:
        backends.append(session.backend)
        return made(session, engine)

    monkeypatch.setattr(native, "points_for", kept)
    read = "SELECT bal FROM acc WHERE aid = %s"
    write = "UPDATE acc SET bal = bal + %s WHERE aid = %s"
    with psycopg.connect(served.dsn, autocommit=True) as con:
        _warmed(con, read, seed=67)
        con.execute("UPDATE acc SET bal = 0 WHERE aid <= 21")
        for key in range(1, 21):
            con.execute(write, [0, key], prepare=True)
        want: dict[int, int] = dict(
            con.execute("SELECT aid, bal FROM acc WHERE aid <= 20").fetchall()
        )
        generation = backends[-1].server_statements.generation
        for drop in [
            "ROLLBACK",
            "CREATE TABLE gone (x INT); DROP TABLE gone",
            "ALTER TABLE acc ADD COLUMN extra INT",
        ]:
            con.execute("BEGIN")
            con.execute(write, [1, 3], prepare=True)
            if drop == "ROLLBACK":
                con.execute("ROLLBACK")
            else:
                con.execute("COMMIT")
                for statement in drop.split("; "):
                    con.execute(statement)
                want[3] += 1
            runs = served.runs
            with con.transaction():
                for key in range(1, 21):
                    con.execute(write, [key, key], prepare=True)
                    want[key] += key
                    assert con.execute(read, [key], prepare=True).fetchone() == (want[key],)
            assert served.runs >= runs + 30, drop  # after DDL: planned and handed over anew
        assert backends[-1].server_statements.generation > generation
        assert dict(con.execute("SELECT aid, bal FROM acc WHERE aid <= 20").fetchall()) == want


def test_native_runs_keep_the_audit_log(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the audit log (``veil serve``'s default) the statements still run natively,
    and each leaves the line the session's run of it leaves: who, the statement's
    shape, the columns it decrypted, its rows, its outcome."""
    client = empty_client_dir(tmp_path / "client", postgres_url)
    served = Served(client, monkeypatch, audit=True)
    read = "SELECT bal, name FROM acc WHERE aid = %s"
    write = "UPDATE acc SET bal = bal + %s WHERE aid = %s"
    insert = "INSERT INTO acc (aid, bal, name) VALUES (%s, %s, %s)"
    try:
        with psycopg.connect(served.dsn, autocommit=True) as con:
            _warmed(con, read, seed=71)
            con.execute("UPDATE acc SET bal = 0 WHERE aid <= 21")
            log = client / "audit.jsonl"
            before = len(log.read_text().splitlines())
            runs = served.runs
            for key in range(1, 21):
                assert con.execute(read, [key], prepare=True).fetchall()
                con.execute(write, [key, key], prepare=True)
                con.execute(insert, [1000 + key, key, f"n{key}"], prepare=True)
                con.execute(f"SELECT bal, name FROM acc WHERE aid = {key}").fetchall()
            assert served.runs >= runs + 40  # the native path still runs
            kept = log.read_text()
            log.rename(log.with_name("audit.1.jsonl"))  # rotated: the next lines start anew
            runs = served.runs
            for key in range(1, 6):
                assert con.execute(read, [key], prepare=True).fetchall()
            assert served.runs == runs + 5
            rotated = [json.loads(line) for line in log.read_text().splitlines()]
            assert [r["statement"] for r in rotated] == [read.replace("%s", "?")] * 5
    finally:
        served.stop()
    lines = [json.loads(line) for line in kept.splitlines()[before:]]
    assert len(lines) == 80  # one line per statement, native or not
    by_statement: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_statement.setdefault(line["statement"], []).append(line)
    assert len(by_statement) == 3, sorted(by_statement)  # the read's two forms: one shape
    for statement, records in by_statement.items():
        fixed = {k: v for k, v in records[0].items() if k not in _CHANGING}
        for record in records:
            assert {k: v for k, v in record.items() if k not in _CHANGING} == fixed, statement
            assert record["outcome"] == "ok" and record["sqlstate"] == "00000"
            assert record["rows"] == 1 and record["user"] == "bench"
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["time"])
            assert isinstance(record["seconds"], float) and record["seconds"] >= 0
        if statement.startswith("SELECT"):
            assert fixed["tables"] == {"acc": ["bal", "name"]}, fixed


# what differs between runs of one statement (plan_cache: a native run's plan is kept)
_CHANGING = {"time", "seconds", "phases", "plan_cache"}
