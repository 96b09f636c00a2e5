"""INSERT, UPDATE and DELETE through the client.

The server cannot compute new ciphertexts, so the client does the work:

- INSERT: the rows (VALUES, or a query run through Veil) are cast to the
  table's types, encrypted per the design and appended.
- DELETE: the client finds the row ids of the matching rows (a Veil query,
  so the WHERE clause is pushed down where it can be) and deletes by row id.
- UPDATE: the client computes the new rows (same query, with the SET
  expressions in place of the columns) and, in one server transaction,
  deletes the old rows and appends the re-encrypted new ones under fresh
  row ids. Every server column of a row, precomputed ones included, is
  rebuilt from the new plaintext row, so they stay consistent.

Row ids come from the table's counter on the server (``veil.session.row_ids``),
taken before the write's transaction begins: fresh for every row written,
INSERT and UPDATE alike, and disjoint between clients writing at once. ASHE
pads are one-time, so an id is never used twice. A Paillier row's slot is
its row id: its values go into a new pack, starting on a pack boundary, so
no pack other rows share is ever rewritten; an old slot is orphaned (no row
selects it any more). DELETE needs nothing more.

Concurrency. The matching rows are read before the write's transaction, so
another client may rewrite or delete some of them in between. Every delete by
row id therefore returns what it deleted: fewer rows than were read means the
statement's view is stale, and it raises ``RowsChangedError`` before appending
anything, which rolls the transaction back. A statement run on its own
(autocommit) that collides so, or whose write the server aborts as a conflict
(DuckDB's optimistic MVCC, a PostgreSQL deadlock), runs again from the start:
read, compute, write, at most ``_ATTEMPTS`` times, after a random pause that
grows with each attempt. Inside an explicit transaction it cannot run alone
again, so the collision reaches the caller as ``SerializationError`` (SQLSTATE
40001), as PostgreSQL's REPEATABLE READ reports it; but on PostgreSQL a write
that changed nothing runs again on the rows now committed, as PostgreSQL's READ
COMMITTED UPDATE goes on with a row's new version (``_again_inside``).
"""

from __future__ import annotations

import contextlib
import random
import time
import weakref
from collections.abc import Callable, Iterator

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from veil.backends.base import LOCATOR, OLD_KEY, BackendError, DuplicateKeyError
from veil.ciphers.blocks import block_columns
from veil.ciphers.encrypt import Resealed, TableEncryptor
from veil.design.model import DET, TableDesign
from veil.encoding import exact_arrow
from veil.errors import SerializationError
from veil.exec.server import FetchStats, run_remote
from veil.keys.generations import scopes
from veil.session import references, upsert
from veil.session.constraints import check_rows, constraint_error, unique_violation
from veil.session.context import SessionContext
from veil.session.defaults import catalog_column, default_value, is_default, number_rows
from veil.session.matching import matching_rows
from veil.session.onions import lock_layers
from veil.session.result import Result
from veil.session.row_ids import allocate
from veil.session.row_locks import hold_keys
from veil.sql.errors import QueryError, UnsupportedStatementError
from veil.sql.remote import delete_rows_statement

_DELETE_CHUNK = 1000
_VALUES_VIEW = "__veil_insert_rows"
# A statement that collides with other writers runs again after a random pause of up
# to _BACKOFF_SECONDS * 2**attempt (at most _BACKOFF_CAP_SECONDS), _ATTEMPTS times in
# all: enough for a few dozen clients updating one row at once.
_ATTEMPTS = 30
_BACKOFF_SECONDS = 0.005
_BACKOFF_CAP_SECONDS = 0.5

# a server column the rows a write replaces keep, and each one's stored value (``_write_rows``)
Located = tuple[str, pa.Array]


_RETURNED = "__veil_returned_rows"
_TWIN = "__veil_upsert_rows"


def run_dml(session: SessionContext, tree: exp.Expr) -> Result:
    ctes = tree.args.get("with_")
    if ctes is not None and any(
        c.this.find(exp.Insert, exp.Update, exp.Delete) for c in ctes.expressions
    ):
        raise UnsupportedStatementError(
            "Veil does not run INSERT, UPDATE or DELETE inside WITH; run them one by one "
            "in a transaction"
        )
    if isinstance(tree, exp.Insert) and ctes is not None:
        tree = _ctes_into_source(tree)
    if isinstance(tree, exp.Insert):
        insert = upsert.alternative_as_conflict(_target(session, tree.this), tree)
        return _retried(session, insert, lambda: _insert(session, insert))
    if isinstance(tree, exp.Update):
        tree = plain_assignments(_target(session, tree.this), tree)
    check(session, tree)
    if isinstance(tree, exp.Delete):
        return _retried(session, tree, lambda: _delete(session, tree))
    assert isinstance(tree, exp.Update)
    return _retried(session, tree, lambda: _update(session, tree))


def _ctes_into_source(tree: exp.Insert) -> exp.Insert:
    """``WITH c AS (...) INSERT INTO t SELECT ... FROM c``: the WITH belongs to the query."""
    moved = tree.copy()
    ctes = moved.args["with_"]
    moved.set("with_", None)
    source = moved.expression
    if isinstance(source, exp.Query):
        source.set("with_", ctes)
    elif source is not None:  # VALUES: each value may read a CTE in a subquery
        moved.set("expression", exp.select("*").from_(source.subquery("v")))
        moved.expression.set("with_", ctes)
    return moved


def plain_assignments(table: TableDesign, tree: exp.Update) -> exp.Update:
    """``tree`` with one ``column = value`` per column: ``SET (a, b) = (1, 2)`` split,
    ``DEFAULT`` replaced by the column's default."""
    assigned: dict[str, exp.Expr] = {}
    for assignment in tree.expressions:
        target, value = assignment.this, assignment.expression
        pairs: list[tuple[exp.Expr, exp.Expr]] = [(target, value)]
        if isinstance(target, exp.Tuple):
            if not isinstance(value, exp.Tuple) or len(value.expressions) != len(
                target.expressions
            ):
                raise QueryError(
                    "SET (a, b, ...) = (...) needs a list of as many values as columns "
                    "(a subquery there is not supported: assign each column)"
                )
            pairs = list(zip(target.expressions, value.expressions, strict=True))
        for column, given in pairs:
            name = column.name.lower()
            found = table.column(name)
            if found is None:
                raise QueryError(f"table {table.name!r} has no column {name!r}")
            if name in assigned:
                raise QueryError(f'Multiple assignments to the same column "{name}"')
            assigned[name] = default_value(table, found) if is_default(given) else given
    rewritten = tree.copy()
    rewritten.set(
        "expressions",
        [exp.EQ(this=exp.column(n), expression=v.copy()) for n, v in assigned.items()],
    )
    return rewritten


def _retried(session: SessionContext, tree: exp.Expr, run: Callable[[], Result]) -> Result:
    """``run()`` in the user's terms (a declared key's duplicate: 23505), see ``retried``."""
    return retried(session, tree.key.upper(), _target(session, tree.this), run)


def retried(
    session: SessionContext, kind: str, table: TableDesign, run: Callable[[], Result]
) -> Result:
    """``run()``, a ``kind`` (UPDATE, ...) of ``table``, from the start again while its write
    collides with another client's; a declared key's duplicate in the user's terms (23505).

    Each failed attempt wrote nothing (its transaction rolled back). A peel
    another client committed meanwhile is read into the design first.
    """
    try:
        return _again(session, kind, table.name, run)
    except DuplicateKeyError:
        raise unique_violation(session.design.tables.get(table.name, table)) from None


def _again(session: SessionContext, kind: str, name: str, run: Callable[[], Result]) -> Result:
    # from its read to its write, no rebuild (ALTER, TRUNCATE, redesign) changes the table
    if session.backend.in_transaction:  # one statement of a larger transaction
        return _again_inside(session, kind, name, run)
    last: SerializationError | None = None
    for attempt in range(_ATTEMPTS):
        stamp = session.design_file_stamp()
        try:
            with _locked(session, name):
                return run()
        except LayersChangedError as exc:
            session.reload_design()  # repairs the design from the server's layers table
            last = exc
        except SerializationError as exc:
            last = exc
        except BackendError as exc:
            if session.design_file_stamp() == stamp:
                raise
            # a rebuild swapped (and dropped) the server tables this attempt read
            session.follow_design()
            last = SerializationError(str(exc))
        pause = min(_BACKOFF_CAP_SECONDS, _BACKOFF_SECONDS * 2**attempt)
        time.sleep(random.uniform(0, pause))
    raise SerializationError(
        f"this {kind} collided with other clients writing the same rows {_ATTEMPTS} times "
        "in a row; nothing was changed: run it again, or have fewer clients write these "
        "rows at once"
    ) from last


def _again_inside(
    session: SessionContext, kind: str, name: str, run: Callable[[], Result]
) -> Result:
    """``run()``, one statement of a larger transaction, again while it wrote nothing and
    the server reads each statement's rows afresh.

    On PostgreSQL (READ COMMITTED, as Veil's transactions run there) a write
    whose rows another client rewrote meanwhile (it waited for their row lock
    until that client committed, then found its row ids gone) runs again on
    the rows now committed, as PostgreSQL's own UPDATE goes on with the row's
    new version: pgbench's clients updating one branch no longer fail their
    transactions (40001) and retry them whole. Elsewhere (DuckDB's snapshot
    would read the same rows again), or once something was written, the
    collision fails the transaction.
    """
    again = session.backend.dialect == "postgres"
    for attempt in range(_ATTEMPTS):
        try:
            with _locked(session, name):
                return run()
        except RowsChangedError as exc:
            if not (again and exc.nothing_written) or attempt == _ATTEMPTS - 1:
                raise _collided(kind) from exc
        except SerializationError as exc:
            raise _collided(kind) from exc
        if attempt:  # the first runs again at once: the rows it waited for are committed
            pause = min(_BACKOFF_CAP_SECONDS, _BACKOFF_SECONDS * 2**attempt)
            time.sleep(random.uniform(0, pause))
    raise AssertionError("unreachable: the last attempt returns or raises")


def _collided(kind: str) -> SerializationError:
    return SerializationError(
        f"another client changed rows this {kind} read before it could write them; "
        "roll the transaction back and run it again"
    )


def check(
    session: SessionContext, tree: exp.Expr, read: str | None = None, before: str | None = None
) -> pa.Table | None:
    """Reject, with DuckDB's reason, every statement DuckDB itself would reject.

    The statement runs on the client's empty copy of the plaintext schema
    (the catalog) and is rolled back: its binder and casts see exactly what
    plaintext DuckDB would (duplicate or unknown target columns, wrong
    value counts, values that do not convert), and nothing reaches the server.
    ``read``: a table whose rows to return before the rollback (what an INSERT made);
    ``before``: a statement to run first in that transaction.
    """
    catalog = session.catalog
    catalog.execute("BEGIN TRANSACTION")
    try:
        if before is not None:
            catalog.execute(before)
        catalog.execute(tree.sql(dialect="duckdb")).fetchall()  # RETURNING: read to the end
        return None if read is None else exact_arrow(catalog, f'SELECT * FROM "{read}"')
    except duckdb.ConstraintException as exc:  # NOT NULL, in PostgreSQL's terms
        raise constraint_error(_target(session, tree.this), exc) from None
    except duckdb.Error as exc:
        raise QueryError(str(exc).replace("\n", " ").strip()) from None
    finally:
        catalog.execute("ROLLBACK")


def _target(session: SessionContext, node: exp.Expr) -> TableDesign:
    table = node.this if isinstance(node, exp.Schema) else node
    if not isinstance(table, exp.Table):
        raise QueryError("DML needs a plain table name as its target")
    if table.name.lower() not in session.design.tables:
        raise QueryError(
            f"unknown table {table.name!r}; loaded tables: {sorted(session.design.tables)}"
        )
    return session.design.table(table.name)


def _insert(session: SessionContext, tree: exp.Insert, given: pa.Table | None = None) -> Result:
    table = _target(session, tree.this)
    source = tree.expression
    stats = FetchStats()
    if given is None and source is not None and not isinstance(source, exp.Values):
        given = session.query(source).table
    if given is not None:
        tree = name_leading_columns(table, tree, given.num_columns)
        plain = _rows_from(session, table, tree, given)
    else:  # VALUES, DEFAULT VALUES
        if isinstance(source, exp.Values) and isinstance(source.expressions[0], exp.Tuple):
            tree = name_leading_columns(table, tree, len(source.expressions[0].expressions))
        plain = _inserted_rows(session, table, tree)
    table = session.design.table(table.name)  # planning its source may have peeled layers
    plain = number_rows(session, table, tree, plain)
    if tree.args.get("conflict") is not None and len(plain):
        return _upsert(session, table, tree, plain)
    write_new_rows(session, table, plain)
    return Result(returning(session, tree, plain), len(plain), stats)


def name_leading_columns(table: TableDesign, tree: exp.Insert, width: int) -> exp.Insert:
    """``tree`` with its target columns named when it names none and gives fewer values
    than the table has columns: PostgreSQL fills the first ``width`` columns and gives the
    rest their defaults, where DuckDB refuses the count."""
    if isinstance(tree.this, exp.Schema) or tree.args.get("by_name"):
        return tree
    if not 0 < width < len(table.columns):
        return tree
    named = tree.copy()
    leading = [exp.to_identifier(c.name, quoted=True) for c in table.columns[:width]]
    named.set("this", exp.Schema(this=named.this, expressions=leading))
    return named


def write_new_rows(session: SessionContext, table: TableDesign, plain: pa.Table) -> None:
    """Write the new rows ``plain`` (the table's columns, identities numbered): refused
    before anything is written if one breaks a constraint, else one transaction under the
    onion layers (``veil.session.point_inserts`` writes its row this way too)."""
    check_rows(session.local, table, plain)  # refuse before writing
    encryptor(session, table).check_domains(plain)
    parents = references.parent_locks(session, table, plain)

    def append(first_id: int) -> None:
        hold_keys(session, parents)
        _write_rows(session, table, plain, first_id)

    _in_layers(session, table, len(plain), append)


def _upsert(
    session: SessionContext, table: TableDesign, tree: exp.Insert, plain: pa.Table
) -> Result:
    """INSERT ... ON CONFLICT: the stored rows sharing a key are read, then rewritten or kept
    (``veil.session.upsert``), in one transaction with the rows inserted."""
    keys = upsert.arbiters(table, tree)
    stored = _rows_sharing_keys(session, table, keys, plain)
    table = session.design.table(table.name)  # reading them may have peeled layers
    resolved = upsert.resolve(session.local, table, tree, keys, plain, stored)
    check_rows(session.local, table, resolved.rows)
    encryptor(session, table).check_domains(resolved.rows)
    # in the order of ``resolved.row_ids``: an ON UPDATE action pairs old and new keys by it
    rewritten = stored.take(pc.index_in(resolved.row_ids, stored.column(stored.num_columns - 1)))
    old = rewritten.select(list(range(len(table.columns)))).rename_columns(
        [c.name for c in table.columns]
    )
    try:
        rewrite_rows(session, table, resolved.row_ids, resolved.rows, old)
    except DuplicateKeyError:
        if (
            session.backend.in_transaction
            or _rows_sharing_keys(session, table, keys, plain).num_rows != stored.num_rows
        ):
            raise KeyRaceError(
                f"another client wrote a row with one of these keys of {table.name!r} while "
                "this INSERT ... ON CONFLICT ran; nothing was written: run it again"
            ) from None
        raise  # another key than the arbiters repeats: 23505
    return Result(returning(session, tree, resolved.rows), len(resolved.rows))


def _rows_sharing_keys(
    session: SessionContext, table: TableDesign, keys: list[list[str]], rows: pa.Table
) -> pa.Table:
    """The stored rows with one of ``keys`` equal to a row of ``rows``: columns, row id."""
    columns: list[exp.Expr] = [exp.column(c.name) for c in table.columns]
    found = [matching_rows(session, table, columns, w) for w in upsert.key_filters(keys, rows)]
    if not found:  # no key in ``rows`` (nulls only): nothing can conflict
        empty = session.catalog.sql(f'SELECT * FROM "{table.name}" LIMIT 0').to_arrow_table()
        return empty.append_column(upsert.ROW_ID, pa.array([], pa.int64()))
    return pa.concat_tables([f.rename_columns(found[0].column_names) for f in found])


def returning_query(tree: exp.Expr) -> exp.Select | None:
    """A query whose columns are those of ``tree``'s RETURNING clause (to describe it)."""
    clause = tree.args.get("returning")
    if clause is None:
        return None
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    source = exp.to_table(target.name).as_(target.alias_or_name)
    return exp.select(*(e.copy() for e in clause.expressions)).from_(source)


def returning(session: SessionContext, tree: exp.Expr, rows: pa.Table) -> pa.Table:
    """What ``tree``'s RETURNING clause makes of ``rows`` (the rows it wrote); empty if none."""
    clause = tree.args.get("returning")
    if clause is None:
        return pa.table({})
    table = _target(session, tree.this)
    labels = {c.name: c.label or c.name for c in table.columns}
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    source = exp.to_table(_RETURNED).as_(target.alias_or_name)
    select = exp.select(*(e.copy() for e in clause.expressions)).from_(source)
    session.local.register(_RETURNED, rows.rename_columns([labels[n] for n in rows.column_names]))
    try:
        return session.local.sql(select.sql(dialect="duckdb")).to_arrow_table()
    except duckdb.Error as exc:
        raise QueryError(f"RETURNING: {str(exc).splitlines()[0]}") from None
    finally:
        session.local.unregister(_RETURNED)


def _in_layers(
    session: SessionContext,
    table: TableDesign,
    rows: int,
    write: Callable[[int], None],
    stats: FetchStats | None = None,
    *,
    one_statement: bool = False,
) -> None:
    """``write(first_id)`` in one transaction, under the onion layers the server holds,
    with ``rows`` fresh row ids from ``first_id`` on, taken from the table's counter once
    its lock is held (a rebuild may have replaced the counter).

    The transaction first locks the table's layers rows (a concurrent peel
    waits, or aborts, until it commits) and checks them against the design:
    if another client peeled a layer meanwhile, nothing is written and the
    statement runs again on the repaired design (``_retried``), never
    writing under a stale layer. ``stats``: where BEGIN and COMMIT count as the server's time.

    ``one_statement``: ``write`` sends one statement, which changes every row
    it is to change or none (a row's UPDATE by its id): with no layers to lock
    and no transaction open, it runs alone and commits by itself (``_alone``).
    """
    with _table_locked(session, table):
        first_id = _fresh_ids(session, table, rows)
        if one_statement and _alone(session) and not _layered(table):
            write(first_id)
            return
        with _transaction(session, stats):
            if not _layers_agree(session, table):
                raise LayersChangedError(
                    f"another client peeled an onion layer of {table.name!r} while this "
                    "statement ran; nothing was written: run it again"
                )
            write(first_id)


def _alone(session: SessionContext) -> bool:
    """Whether a write of one statement runs without a BEGIN and a COMMIT of its own: in
    autocommit, on either server. PostgreSQL: two round trips of a point UPDATE's four.
    DuckDB: in one process, alternating execution by execution on one table (``veil bench
    point``'s UPDATE by key, TPC-H SF 0.1, four runs of 400 at load 5.5-8.3), in
    autocommit 5.88 / 10.58 / 11.96 / 8.00 ms against 6.41 / 11.13 / 12.07 / 8.13 in a
    transaction (plaintext 1.4-3.8); the next point read after an autocommit write is
    quicker too (0.74 against 1.03 ms, raw statements). (8d572e9 kept DuckDB's transaction
    on runs of separate worktrees whose plaintext side moved as much: 1.9 -> 3.4-3.7 ms.)
    The statement changes its row or nothing; a concurrent write of the row fails it as
    inside a transaction (``_retried``)."""
    return not session.backend.in_transaction


@contextlib.contextmanager
def _transaction(session: SessionContext, stats: FetchStats | None) -> Iterator[None]:
    """The backend's transaction, its BEGIN and its COMMIT (or ROLLBACK) counted in ``stats``
    as the server's time (``veil bench point`` splits a write's time so, issue 41)."""
    block = session.backend.transaction()
    with _server_time(stats):
        block.__enter__()
    try:
        yield
    except BaseException as exc:
        with _server_time(stats):
            if not block.__exit__(type(exc), exc, exc.__traceback__):
                raise
    else:
        with _server_time(stats):
            block.__exit__(None, None, None)


@contextlib.contextmanager
def _server_time(stats: FetchStats | None, statements: int = 0) -> Iterator[None]:
    """The block's time counted in ``stats`` (if any) as the server's."""
    started = time.perf_counter()
    try:
        yield
    finally:
        if stats is not None:
            stats.server_seconds += time.perf_counter() - started
            stats.statements += statements


# each session's table encryptors, made once per design table and master key: making one
# derives its columns' keys (~0.2 ms for TPC-H orders), twice per write before (issue 41)
_ENCRYPTORS: weakref.WeakKeyDictionary[
    object, dict[int, tuple[tuple[object, ...], TableEncryptor]]
] = weakref.WeakKeyDictionary()
_ENCRYPTORS_KEPT = 64  # tables per session, all forgotten past it


def encryptor(session: SessionContext, table: TableDesign) -> TableEncryptor:
    """``table``'s encryptor under the session's master key, made once per session.

    Kept by the design table object itself, so a reloaded design (DDL, a peel,
    a re-key's switch) gets new ones.
    """
    master = session.master
    try:
        kept = _ENCRYPTORS.setdefault(session, {})
    except TypeError:  # a session that cannot be weakly referenced: made each time
        return TableEncryptor(master, table)
    # and by what its ciphers are made of, in case the table object changed in place
    made_of = (master, *scopes(table), *(e.outer is None for e in table.encryptions))
    found = kept.get(id(table))
    if found is not None and found[0] == made_of and found[1].table is table:
        return found[1]
    if len(kept) >= _ENCRYPTORS_KEPT:
        kept.clear()
    made = TableEncryptor(master, table)
    kept[id(table)] = (made_of, made)
    return made


@contextlib.contextmanager
def _table_locked(session: SessionContext, table: TableDesign) -> Iterator[None]:
    """Hold ``table``'s write lock (``veil.session.table_locks``) for the write's transaction.

    A rebuild that swapped the table's server tables before this write got the
    lock made the rows it read stale: then nothing is written and the
    statement runs again on the new design.
    """
    with _locked(session, table.name):
        current = session.design.tables.get(table.name)
        # a re-key's final switch changes the keys (not the server tables) the rows were
        # to be encrypted under: ``table``'s scopes may name a key the session no longer
        # reads them with (``veil.keys.generations``)
        if current is None or (current.server_name, scopes(current)) != (
            table.server_name,
            scopes(table),
        ):
            raise LayersChangedError(
                f"another client rebuilt table {table.name!r} (ALTER, TRUNCATE, redesign) while "
                "this statement ran; nothing was written: run it again"
            )
        yield


@contextlib.contextmanager
def _locked(session: SessionContext, name: str) -> Iterator[None]:
    """Hold table ``name``'s lock shared, then read the design again (a rebuild that held
    it meanwhile changed it). An autocommit statement holds its locks until its
    outermost write ends (a foreign key's action writes other tables inside it); a
    transaction until it ends."""
    session.table_locks.take(name)
    session.writes_running += 1
    try:
        session.follow_design()
        yield
    finally:
        session.writes_running -= 1
        if not session.in_transaction and not session.writes_running:
            session.table_locks.release()


class LayersChangedError(SerializationError):
    """A peel committed between a statement's reads and its write (which then did not happen)."""


class KeyRaceError(SerializationError):
    """Another client wrote one of an upsert's keys between its read and its write."""


class RowsChangedError(SerializationError):
    """Another client rewrote or deleted rows between a statement's read and its write."""

    # whether the failed write changed nothing at all on the server (then a statement
    # inside a transaction may run again: ``_again``)
    nothing_written = False

    @classmethod
    def of(
        cls, table: TableDesign, missing: int, *, nothing_written: bool = False
    ) -> RowsChangedError:
        error = cls(
            f"another client changed {missing} of the rows of {table.name!r} this statement "
            "read before it wrote; nothing was written: run it again"
        )
        error.nothing_written = nothing_written
        return error


def _layered(table: TableDesign) -> bool:
    """Whether a write to ``table`` locks its layers row: some column is wrapped in a layer,
    or its ASHE words are not built yet (a build must not interleave with a write either)."""
    lazy = table.sums is not None and table.sums.lazy
    return bool(table.layers_table) and (lazy or any(e.outer for e in table.encryptions))


def _layers_agree(session: SessionContext, table: TableDesign) -> bool:
    if not _layered(table):
        return True
    state = lock_layers(session, table)
    peeled = {n for n, p in zip(*(state.column(i).to_pylist() for i in (0, 1)), strict=True) if p}
    return not any(e.outer and e.name in peeled for e in table.encryptions)


def insert_rows(
    session: SessionContext, table_name: str, columns: list[str] | None, rows: pa.Table
) -> Result:
    """INSERT INTO table_name [(columns)] the rows of ``rows`` (COPY FROM's, as text)."""
    target = exp.to_table(table_name)
    into: exp.Expr = (
        exp.Schema(this=target, expressions=[exp.to_identifier(c) for c in columns])
        if columns
        else target
    )
    tree = exp.Insert(this=into, expression=exp.select("*").from_(_VALUES_VIEW))
    return _retried(session, tree, lambda: _insert(session, tree, given=rows))


def _rows_from(
    session: SessionContext, table: TableDesign, tree: exp.Insert, rows: pa.Table
) -> pa.Table:
    """The rows ``tree`` inserts when its source returned ``rows``."""
    given = (  # positional unless BY NAME (names may repeat in a query's output)
        rows
        if tree.args.get("by_name")
        else rows.rename_columns([f"v{i}" for i in range(rows.num_columns)])
    )
    session.catalog.register(_VALUES_VIEW, given)
    try:
        replaced = tree.copy()
        replaced.set("expression", exp.select("*").from_(_VALUES_VIEW))
        return _inserted_rows(session, table, replaced)
    finally:
        session.catalog.unregister(_VALUES_VIEW)


def _inserted_rows(session: SessionContext, table: TableDesign, tree: exp.Insert) -> pa.Table:
    """The rows ``tree`` inserts, as DuckDB's own INSERT makes them (column lists, casts, NULLs)."""
    if tree.args.get("conflict") is not None:
        # DuckDB's ON CONFLICT may reorder the rows (and merges repeats): validated as given,
        # the rows are made without it, in order, in a key-less twin of the table
        check(session, tree)
        tree = tree.copy()
        tree.set("conflict", None)
        tree.set("returning", None)
        target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        target.replace(exp.to_table(_TWIN))
        twin = ", ".join(catalog_column(c) for c in table.columns)
        rows = check(session, tree, read=_TWIN, before=f'CREATE TEMP TABLE "{_TWIN}" ({twin})')
    else:
        rows = check(session, tree, read=table.name)
    assert rows is not None
    # the catalogue spells columns as the source did ("Order ID"); the design lower-cases
    return rows.rename_columns([c.name for c in table.columns])


def _fresh_ids(session: SessionContext, table: TableDesign, count: int) -> int:
    """The first of ``count`` fresh row ids (on a pack boundary for a Paillier group)."""
    align = table.hom.rows_per_ciphertext if table.hom is not None else 1
    return allocate(session.backend, table, count, align=align)


def _write_rows(
    session: SessionContext,
    table: TableDesign,
    plain: pa.Table,
    first_id: int,
    replacing: pa.Array | None = None,
    stats: FetchStats | None = None,
    kept: set[str] | None = None,
    resealed: Resealed | None = None,
    located: Located | None = None,
) -> None:
    """Encrypt rows under the ids ``first_id``, ``first_id + 1``, ... and write them.

    The first ``len(replacing)`` rows take the place of the stored rows
    ``replacing`` (in order): one server UPDATE where the server can
    (``Backend.updates_in_place``), so the table keeps its size, order and
    indexes; else those rows are deleted and all of ``plain`` appended. Either
    way the rows get fresh ids: ASHE's pads and a row-bound RND's nonces are
    one-time per id. A Paillier group's packs and the BLOCKS side table get
    new entries for the new ids (``first_id`` starts a pack); the old ones
    belong to ids no row has any more. ``stats``: where the writes count as the server's
    time, and the encryption of the rows as encryption. ``kept``: columns whose values are
    the replaced rows' own (``unchanged_columns``: left out of an UPDATE in place).
    ``resealed``: row-bound columns of the replaced rows carried to the new ids as they
    are stored (``Resealed``: an UPDATE in place of every row of ``plain``).
    ``located``: a server column the replaced rows keep, with each one's stored value,
    by which a server that ``locates_rows`` finds them (``LOCATOR``; an UPDATE in place
    of every row of ``plain``, the column one ``kept`` leaves unwritten).
    """
    encrypting = encryptor(session, table)
    if table.hom is not None and len(plain):
        group = session.ciphers.group(table)
        values = group.values(encrypting.sources(plain))
        packs = group.encrypt_packs(values, first_id // group.rows)
        session.backend.append(table.hom.server_name, packs)
    replaced = 0 if replacing is None else len(replacing)
    in_place = bool(replaced) and session.backend.updates_in_place
    # every row replaced in place: the columns it keeps are never encrypted
    unwritten = unchanged_columns(table, kept) if in_place and kept else []
    started = time.perf_counter()
    whole = replaced == len(plain)
    if resealed is not None and not (in_place and whole):
        raise ValueError("stored values are resealed only by an UPDATE in place")
    rows = encrypting.encrypt(
        plain, first_id, unwritten=unwritten if whole else (), resealed=resealed
    )
    if stats is not None:  # the new rows' encryption: the write's client part
        stats.encrypt_seconds += time.perf_counter() - started
    if in_place:
        assert replacing is not None
        old_ids = replacing if replacing.type == pa.int64() else replacing.cast(pa.int64())
        changed = rows.slice(0, replaced).append_column(OLD_KEY, old_ids)
        names = set(changed.column_names)  # the property makes a new list each time
        changed = changed.drop_columns([c for c in unwritten if c in names])
        if (
            located is not None
            and session.backend.locates_rows
            and whole
            and located[0] in unwritten
        ):
            changed = changed.append_column(LOCATOR + located[0], located[1])
        with _server_time(stats, 1):
            _update_rows(session, table, changed)
        rows = rows.slice(replaced)
    elif replaced:
        assert replacing is not None
        with _server_time(stats, 1):
            _delete_rows(session, table, replacing)
    if len(rows):
        with _server_time(stats, 1):
            session.backend.append(table.server_name, rows)
    sealed = encrypting.blocks(plain, first_id)
    if sealed is not None and len(plain):
        session.backend.append(table.blocks_table, sealed)


def unchanged_columns(table: TableDesign, kept: set[str]) -> list[str]:
    """The server columns of ``table`` that rewriting a row whose columns ``kept`` keep
    their values leaves as they are: DET of such a column, unwrapped. DET is the same
    ciphertext for the same value under the same key, bound to no row id, so an UPDATE in
    place need not write it (DuckDB rewrites a row whose indexed column an UPDATE sets
    as a delete and an insert, its indexes too: issue 41's point UPDATE). Row-bound
    columns (RND, a layer) change with the row's fresh id and are always written.
    """
    return [
        e.name
        for e in table.encryptions
        if e.scheme == DET and e.outer is None and not e.is_expression and e.source in kept
    ]


def _update_rows(session: SessionContext, table: TableDesign, changed: pa.Table) -> None:
    """Set the rows ``changed[OLD_KEY]`` to ``changed``'s server rows: every one, or raise."""
    updated = session.backend.update_rows(table.server_name, table.row_id, changed)
    if updated < len(changed):
        # a Paillier group's packs were appended before: not nothing
        untouched = not updated and table.hom is None
        raise RowsChangedError.of(table, len(changed) - updated, nothing_written=untouched)


def _delete_rows(session: SessionContext, table: TableDesign, row_ids: pa.Array) -> None:
    """Delete the rows ``row_ids`` in the current transaction: every one of them, or raise."""
    ids = row_ids.to_pylist()
    deleted = 0
    for start in range(0, len(ids), _DELETE_CHUNK):
        statement = delete_rows_statement(table, ids[start : start + _DELETE_CHUNK])
        deleted += run_remote(statement, session.backend, FetchStats()).num_rows
    if deleted < len(set(ids)):
        raise RowsChangedError.of(table, len(set(ids)) - deleted)


def _delete(session: SessionContext, tree: exp.Delete) -> Result:
    table = _target(session, tree.this)
    referenced = references.referencing(session.design, table.name)
    # what RETURNING shows, else what the referencing tables' foreign keys name
    columns = (
        [c.name for c in table.columns]
        if tree.args.get("returning") is not None
        else sorted({c for _, r in referenced for c in r.parent_columns})
    )
    alias = tree.this.alias_or_name
    wanted: list[exp.Expr] = [exp.column(c, table=alias) for c in columns]
    matched = matching_rows(
        session, table, wanted or [exp.Literal.number(1)], tree.args.get("where"), tree
    )
    row_ids = matched.column(matched.num_columns - 1).combine_chunks()
    deleted = matched.select(list(range(len(columns)))).rename_columns(columns)
    delete_rows(session, table, row_ids, deleted if referenced else None)
    return Result(returning(session, tree, deleted), len(row_ids))


def delete_rows(
    session: SessionContext,
    table: TableDesign,
    row_ids: pa.Array,
    keys: pa.Table | None = None,
    stats: FetchStats | None = None,
) -> None:
    """Delete the rows ``row_ids`` in one transaction: every one of them, or raise.
    ``keys``: their values of the columns other tables' foreign keys name, to check;
    ``stats``: where the server's time counts."""
    # one row's DELETE deletes it or nothing: it needs no transaction of its own
    alone = keys is None and len(row_ids) == 1 and _alone(session)
    with (
        _table_locked(session, table),
        contextlib.nullcontext() if alone else _transaction(session, stats),
        _server_time(stats, 1),
    ):
        _delete_rows(session, table, row_ids)
        if keys is not None:
            references.check_unreferenced(session, table, keys)


def _update(session: SessionContext, tree: exp.Update) -> Result:
    """Read the matching rows, then rewrite them under fresh ids, in one transaction.

    A peel committed by another client between the read and the write may
    have made the read decrypt under a stale layer, and another writer may
    have changed the rows: then nothing is written (``_retried`` runs the
    statement again).
    """
    table = _target(session, tree.this)
    assigned = {a.this.name.lower(): a.expression for a in tree.expressions}  # one per column
    projections: list[exp.Expr] = [
        exp.alias_(exp.cast(assigned[c.name].copy(), c.type), c.name)
        if c.name in assigned
        else exp.column(c.name, table=tree.this.alias_or_name)
        for c in table.columns
    ]
    rekeyed = {
        c for _, r in references.referencing(session.design, table.name) for c in r.parent_columns
    }
    old_keys = sorted(rekeyed) if rekeyed & set(assigned) else []  # old referenced keys
    alias = tree.this.alias_or_name
    projections += [exp.alias_(exp.column(c, table=alias), f"__veil_old_{c}") for c in old_keys]
    matched = matching_rows(session, table, projections, tree.args.get("where"), tree)
    table = session.design.table(table.name)  # planning the match may have peeled layers
    row_ids = matched.column(matched.num_columns - 1).combine_chunks()
    names = [c.name for c in table.columns]
    plain = matched.select(list(range(len(names)))).rename_columns(names)
    old = None
    if old_keys:
        at = list(range(len(names), len(names) + len(old_keys)))
        old = matched.select(at).rename_columns(old_keys)
    update_rows(session, table, row_ids, plain, set(assigned), old)
    return Result(returning(session, tree, plain), len(row_ids))


def update_rows(
    session: SessionContext,
    table: TableDesign,
    row_ids: pa.Array,
    plain: pa.Table,
    assigned: set[str],
    old: pa.Table | None = None,
    stats: FetchStats | None = None,
    resealed: Resealed | None = None,
    located: Located | None = None,
) -> None:
    """Replace the rows ``row_ids`` by their new values ``plain`` (the columns ``assigned``
    changed), refusing values the table does not take before writing anything.
    ``stats``: where the server's time counts; ``resealed``, ``located``: see
    ``_write_rows`` (``plain`` then holds the other columns only)."""
    check_rows(session.local, table, plain)
    encryptor(session, table).check_domains(plain)
    named = {c for r in table.references for c in r.columns} & assigned
    kept = {c.name for c in table.columns} - assigned
    rewrite_rows(
        session,
        table,
        row_ids,
        plain,
        old,
        check_parents=bool(named),
        stats=stats,
        kept=kept,
        resealed=resealed,
        located=located,
    )


def rewrite_rows(
    session: SessionContext,
    table: TableDesign,
    row_ids: pa.Array,
    rows: pa.Table,
    old: pa.Table | None = None,
    *,
    check_parents: bool = True,
    stats: FetchStats | None = None,
    kept: set[str] | None = None,
    resealed: Resealed | None = None,
    located: Located | None = None,
) -> None:
    """Replace the rows ``row_ids`` (read under the design's layers) by the first rows of
    ``rows``, which may hold more (inserted ones), under fresh ids, in one transaction. ``old``: the replaced
    rows' values of the columns other tables' foreign keys name, where they may change;
    ``check_parents``: whether the rows' own foreign keys may have changed; ``kept``: the
    columns whose values in ``rows`` are the replaced rows' own, as read."""
    parents = references.parent_locks(session, table, rows) if check_parents else []
    # one row written in place is one statement (``_write_rows``)
    alone = (
        len(rows) == len(row_ids) == 1
        and session.backend.updates_in_place
        and not (parents or old is not None or table.hom is not None or block_columns(table))
    )

    def rewrite(first_id: int) -> None:
        hold_keys(session, parents)
        _write_rows(
            session,
            table,
            rows,
            first_id,
            row_ids,
            stats=stats,
            kept=kept,
            resealed=resealed,
            located=located,
        )
        if old is not None:
            references.check_unreferenced(session, table, old, rows)

    _in_layers(
        session, table, len(rows), rewrite, stats, one_statement=alone
    )  # its rows were read under these layers
