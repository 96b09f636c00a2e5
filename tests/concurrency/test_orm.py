"""An ORM application and pandas writing through ``veil serve``, on DuckDB and PostgreSQL.

SQLAlchemy's declarative models with ``create_all`` (serial keys, NOT NULL,
UNIQUE, defaults, FOREIGN KEYs), inserts that read back generated keys
(``INSERT ... RETURNING``), relationships, updates and deletes in sessions
with commit and rollback; then ``DataFrame.to_sql`` of every column kind and
``read_sql`` back. Each side is the real client library over the real wire.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from veil._native import WireServer
from veil.serve.engine import Engine

sqlalchemy = pytest.importorskip("sqlalchemy")
pandas = pytest.importorskip("pandas")
orm = pytest.importorskip("sqlalchemy.orm")


@pytest.fixture
def engine(load_tables: Callable[[dict[str, pa.Table]], Path]) -> Iterator[object]:
    client = load_tables({"seed": pa.table({"x": pa.array([1], pa.int64())})})
    wire = Engine(client)
    server = WireServer(wire, "127.0.0.1:0", None, None, True)
    port = server.address.rsplit(":", 1)[1]
    made = sqlalchemy.create_engine(f"postgresql+psycopg://app@127.0.0.1:{port}/veil")
    try:
        yield made
    finally:
        made.dispose()
        server.stop()
        wire.close()  # its pooled sessions' server connections


class Base(orm.DeclarativeBase):
    pass


class Author(Base):
    __tablename__ = "authors"
    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    name: orm.Mapped[str] = orm.mapped_column(sqlalchemy.String(40), unique=True)
    joined: orm.Mapped[dt.date] = orm.mapped_column(
        server_default=sqlalchemy.text("DATE '2026-01-01'")
    )
    books: orm.Mapped[list[Book]] = orm.relationship(back_populates="author")


class Book(Base):
    __tablename__ = "books"
    id: orm.Mapped[int] = orm.mapped_column(primary_key=True)
    title: orm.Mapped[str]
    price: orm.Mapped[float | None]
    author_id: orm.Mapped[int] = orm.mapped_column(sqlalchemy.ForeignKey("authors.id"))
    author: orm.Mapped[Author] = orm.relationship(back_populates="books")


def test_an_orm_application(engine: object) -> None:
    Base.metadata.create_all(engine)  # type: ignore[arg-type]
    with orm.Session(engine) as session:  # type: ignore[call-overload]
        ann = Author(name="Ann", books=[Book(title="One", price=9.5), Book(title="Two")])
        bob = Author(name="Bob")
        session.add_all([ann, bob])
        session.commit()
        assert {ann.id, bob.id} == {1, 2}  # generated keys read back (RETURNING)
        assert ann.joined == dt.date(2026, 1, 1)
        assert sorted(b.id for b in ann.books) == [1, 2]

        ann.books[0].price = 10.0
        bob.books.append(Book(title="Three", price=3.0))
        session.commit()

        session.add(Author(name="Ann"))  # a repeated UNIQUE name: refused, rolled back
        with pytest.raises(sqlalchemy.exc.IntegrityError):
            session.commit()
        session.rollback()

        session.add(Book(title="Orphan", author_id=99))  # no such author: 23503
        with pytest.raises(sqlalchemy.exc.IntegrityError):
            session.commit()
        session.rollback()

        cheap = session.scalars(sqlalchemy.select(Book).where(Book.price < 5)).all()
        assert [(b.title, b.author.name) for b in cheap] == [("Three", "Bob")]
        session.delete(cheap[0])
        session.commit()

        rolled = session.get(Book, 2)
        assert rolled is not None
        rolled.title = "Changed"
        session.flush()
        session.rollback()  # the UPDATE is undone on the server
        titles = session.scalars(sqlalchemy.select(Book.title).order_by(Book.id)).all()
        assert titles == ["One", "Two"]
        ann = session.get(Author, 1)
        assert ann is not None
        assert {b.title: b.price for b in ann.books} == {"One": 10.0, "Two": None}


def test_pandas_to_sql_of_every_column_kind(engine: object) -> None:
    frame = pandas.DataFrame(
        {
            "i": [1, -2, None],
            "big": [2**40, 0, 7],
            "f": [1.5, float("nan"), -0.25],
            "s": ["a", None, "ü ñ"],
            "b": [True, False, None],
            "d": pandas.to_datetime(["2026-01-02 00:00:00", None, "1999-12-31 23:59:59"]),
            "tz": pandas.to_datetime(
                ["2026-01-02 03:04:05+02:00", None, "2020-06-01 00:00:00+00:00"], utc=True
            ),
            "day": [dt.date(2026, 1, 2), dt.date(1970, 1, 1), None],
        }
    )
    frame["i"] = frame["i"].astype("Int64")
    frame.to_sql("frames", engine, index=False)  # creates the table, FLOAT(53) and all
    back = pandas.read_sql("SELECT * FROM frames", engine)
    assert len(back) == 3
    for column in frame.columns:
        want = [None if pandas.isna(v) else v for v in frame[column].tolist()]
        got = [None if pandas.isna(v) else v for v in back[column].tolist()]
        if column == "day":
            got = [None if v is None else pandas.Timestamp(v).date() for v in got]
        if column in ("d", "tz"):
            got = [None if v is None else pandas.Timestamp(v) for v in got]
        assert got == want, column


def test_constraint_violations_reach_psql_clients_with_their_sqlstates(engine: object) -> None:
    import psycopg

    url = engine.url  # type: ignore[attr-defined]
    with psycopg.connect(
        host=url.host, port=url.port, user="app", dbname="veil", autocommit=True
    ) as con:
        con.execute(
            "CREATE TABLE parent (id serial PRIMARY KEY, code text UNIQUE NOT NULL, "
            "n int CHECK (n > 0), fixed int GENERATED ALWAYS AS IDENTITY)"
        )
        con.execute("CREATE TABLE child (p int REFERENCES parent (id))")
        made = con.execute("INSERT INTO parent (code, n) VALUES ('a', 1) RETURNING id").fetchall()
        assert made == [(1,)]
        cases = [
            ("INSERT INTO parent (code, n) VALUES (NULL, 1)", "23502"),
            ("INSERT INTO parent (code, n) VALUES ('a', 1)", "23505"),
            ("INSERT INTO parent (code, n) VALUES ('b', 0)", "23514"),
            ("INSERT INTO child VALUES (99)", "23503"),
            ("INSERT INTO parent (code, n, fixed) VALUES ('c', 1, 5)", "428C9"),
        ]
        for sql, sqlstate in cases:
            with pytest.raises(psycopg.Error) as raised:
                con.execute(sql)
            assert raised.value.sqlstate == sqlstate, sql
        con.execute("INSERT INTO child VALUES (1)")
        with pytest.raises(psycopg.Error) as raised:
            con.execute("DELETE FROM parent")
        assert raised.value.sqlstate == "23503"
        upserted = con.execute(
            "INSERT INTO parent (code, n) VALUES ('a', 5) ON CONFLICT (code) "
            "DO UPDATE SET n = excluded.n RETURNING id, n"
        )
        assert upserted.fetchall() == [(1, 5)] and upserted.statusmessage == "INSERT 0 1"
