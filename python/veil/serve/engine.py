"""What the wire server calls: an engine over one client directory, a session per connection.

``veil_wire`` (Rust) calls ``Engine.open`` when a connection sends its first
statement and ``Engine.verifier`` during SCRAM authentication; then
``WireSession.run`` for each query string (several statements under the
simple protocol, one with parameters under the extended one) and
``describe`` for Describe messages. Results are ``("rows", fields,
batches)``, ``("command", tag, rowcount)`` or ``("empty",)``; errors are
``WireError`` with a SQLSTATE.

Each session is a ``veil.session.session.Session`` of its own (its own
connection to the server, local DuckDB and plan cache), so concurrent
clients run side by side; an embedded DuckDB server file is opened once per
process and shared by them.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil import statements
from veil.audit.log import AuditLog
from veil.audit.observe import ObservedSession, Observer, Watch
from veil.audit.timings import PhaseLog
from veil.audit.timings import wanted as timings_wanted
from veil.errors import VeilError
from veil.load.ddl import DDL
from veil.serve import catalog, copy, dialect, grants, native, settings, shapes, text, users
from veil.serve.errors import WireError, wire_error
from veil.serve.metrics import Metrics
from veil.serve.types import (
    TEXT,
    array_literals,
    declared_oids,
    oid_of_arrow,
    oid_of_duckdb,
    parameter_value,
)
from veil.session import native_plans
from veil.session.dml import returning_query
from veil.session.result import Streamed
from veil.session.session import Session
from veil.sql import pg_types
from veil.sql.literals import Normalized
from veil.sqlstates import query_sqlstate

log = logging.getLogger(__name__)

Outcome = tuple[Any, ...]
# statements answered the same in a failed transaction (PostgreSQL refuses the rest)
_OUTSIDE_TRANSACTIONS = ("set", "reset", "show", "ignore", "close")
_CACHED_STATEMENTS = 256  # per connection, then the caches start over
_UNTYPED = (0, 705)  # a parameter the client gave no type (unspecified, or "unknown")

# What SHOW answers before a SET (the values drivers ask for at connect time).
_DEFAULT_SETTINGS = {
    "server_version": catalog.SERVER_VERSION,
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "datestyle": "ISO, MDY",
    "intervalstyle": "postgres",
    "timezone": "UTC",
    "standard_conforming_strings": "on",
    "integer_datetimes": "on",
    "search_path": '"$user", public',
    "transaction_isolation": "read committed",
    "default_transaction_isolation": "read committed",
    "transaction_read_only": "off",
    "max_identifier_length": "63",
    "lc_collate": "C",
    "lc_ctype": "C",
    "application_name": "",
    "extra_float_digits": "1",
}
_DECLARE = re.compile(
    r'^DECLARE\s+(?P<name>"[^"]+"|\S+)\s+(?:(?:BINARY|INSENSITIVE|ASENSITIVE|NO\s+SCROLL|SCROLL)\s+)*'
    r"CURSOR\s+(?:(?:WITH|WITHOUT)\s+HOLD\s+)?FOR\s+(?P<query>.*)$",
    re.IGNORECASE | re.DOTALL,
)
_FETCH = re.compile(
    r"^(?P<verb>FETCH|MOVE)\s+(?:(?:FORWARD|NEXT)\s+)?(?P<count>\d+|ALL)?\s*(?:FROM|IN)?\s*"
    r'(?P<name>"[^"]+"|\S+)\s*;?$',
    re.IGNORECASE,
)
_SET_TIME_ZONE = re.compile(
    r"^SET\s+(?:SESSION\s+|LOCAL\s+)?TIME\s+ZONE\s+(?P<value>.*)$", re.IGNORECASE | re.DOTALL
)
# the settings PostgreSQL reports in ParameterStatus when they change (GUC_REPORT), by
# the names it reports (and SHOW names its column) them
_REPORTED = {
    "timezone": "TimeZone",
    "datestyle": "DateStyle",
    "intervalstyle": "IntervalStyle",
    "application_name": "application_name",
    "client_encoding": "client_encoding",
    "standard_conforming_strings": "standard_conforming_strings",
}
_SET = re.compile(
    r"^SET\s+(?:SESSION\s+|LOCAL\s+)?(?P<name>[\w.]+)\s*(?:=|\s+TO\s+)\s*(?P<value>.*)$",
    re.IGNORECASE | re.DOTALL,
)


class Engine:
    """Sessions for the wire server's connections, from a pool of idle Veil sessions.

    A closed connection's session (its server connection, local DuckDB and
    plan cache) goes back to the pool for the next connection, so a BI tool
    or notebook that reconnects often reuses the server connection and the
    plans; at most ``idle`` wait there, the rest are closed.

    ``audit``: each statement leaves a line in the client directory's audit
    log (``veil.audit``; ``veil serve`` turns it on unless ``--no-audit``).
    ``metrics``: each statement counts in ``veil serve --metrics``. With
    neither, sessions are plain ``Session``s and nothing is measured.
    """

    def __init__(
        self,
        client_dir: str | os.PathLike[str],
        *,
        idle: int = 8,
        audit: bool = False,
        metrics: Metrics | None = None,
    ):
        self.client_dir = os.fspath(client_dir)
        self.idle = idle
        self._pool: list[Session] = []
        self._pool_lock = threading.Lock()
        self.audit = AuditLog(self.client_dir) if audit else None
        self.metrics = metrics
        timings = PhaseLog() if timings_wanted() else None  # --log-level debug
        sinks = [s for s in (self.audit, metrics, timings) if s is not None]
        self.observer = Observer(sinks, dialect.READ) if sinks else None
        self._session_class = ObservedSession if sinks else Session

    def open(self, user: str, database: str) -> WireSession:
        with self._pool_lock:
            session = self._pool.pop() if self._pool else None
        if session is None:
            try:
                session = self._session_class(self.client_dir)
            except VeilError as exc:
                raise wire_error(exc) from None
            catalog.install(session.catalog)  # once per session: pooled ones have them
        if self.metrics is not None:
            self.metrics.opened()
        return WireSession(session, user, database, self)

    def release(self, session: Session) -> None:
        """A connection ended: keep its session for the next one, or close it."""
        with self._pool_lock:
            if len(self._pool) < self.idle:
                self._pool.append(session)
                return
        session.close()

    def close(self) -> None:
        with self._pool_lock:
            idle, self._pool = self._pool, []
        for session in idle:
            session.close()
        if self.audit is not None:
            self.audit.close()
        if self.metrics is not None:
            self.metrics.stop()

    def verifier(self, user: str) -> tuple[bytes, bytes] | None:
        return users.verifier(self.client_dir, user)


class WireSession:
    def __init__(self, session: Session, user: str, database: str, engine: Engine | None = None):
        self.veil = session
        self.engine = engine
        self.user = user
        self.database = database or "veil"
        self.settings = dict(_DEFAULT_SETTINGS)
        self.written = 0  # DML statements applied since BEGIN
        self.savepoints: dict[str, int] = {}  # name -> statements written when it was set
        self.pending_copy: tuple[copy.CopySpec, list[str]] | None = None
        self._stream: Streamed | None = None  # the result being sent, read as it runs
        # SQL cursors (DECLARE ... CURSOR FOR): their results and how far they were read
        self.cursors: dict[str, tuple[pa.Table, int]] = {}
        # per connection: the statements drivers send again and again
        self._translations: dict[tuple[str, int], dialect.Statement] = {}
        # INSERT/UPDATE/DELETE with parameters: a Bind only reads their trees (``_prepared``
        # translates a copy), where a statement with its values written in changes its own
        self._bound_dml: dict[tuple[str, int], dialect.Statement] = {}
        self._descriptions: dict[tuple[str, tuple[int, ...], int], Any] = {}
        # statements with parameters as the session runs them (``_prepared``)
        self._marked: dict[tuple[object, ...], tuple[exp.Expr, str, list[int]]] = {}
        self._types: dict[tuple[object, ...], dict[int, str]] = {}
        # statements with integers written in, by shape (``shapes``), and the shape of
        # the statement being translated, to keep its translation
        self._shapes: dict[tuple[object, ...], shapes.Translated] = {}
        self._shaping: tuple[tuple[object, ...], Any] | None = None
        self._lock = threading.Lock()
        self._rights: tuple[tuple[int, int] | None, grants.Rights] | None = None
        self._users = users.users_path(engine.client_dir) if engine is not None else None
        # the schema, and the design and stamp it was read off
        self._schema: tuple[object, int, dialect.Schema] | None = None
        # the design file's stamp, read once per statement (its caches' keys): None until
        # the statement asks for it
        self._stamp: int | None = None
        # prepared point queries the wire server answers without Python (``native``), the
        # checks each statement had, and the call being answered (its text and parameters)
        self.native_points = native.points_for(session, engine) if engine is not None else None
        self.native_tries: dict[tuple[str, tuple[int, ...]], int] = {}
        self.native_version: object = None  # the design the tries were counted on
        self._native_call: tuple[str, Sequence[tuple[str | None, int]]] | None = None

    @property
    def zone(self) -> str:
        """The session's TimeZone: timestamptz values are shown in it."""
        return self.settings.get("timezone", "UTC")

    @property
    def schema(self) -> dialect.Schema:
        """The plaintext schema (it changes with DDL, here or in another session: the
        session then follows to a new design object, saved with a new stamp)."""
        design, stamp = self.veil.design, self._design_stamp()
        if self._schema is not None and self._schema[:2] == (design, stamp):
            return self._schema[2]
        schema: dialect.Schema = {
            name: {c.name: c.type for c in table.columns} for name, table in design.tables.items()
        }
        self._schema = (design, stamp, schema)
        return schema

    def _design_stamp(self) -> int:
        """The design file's stamp for this statement's cache keys (a stat, ~8 us: the
        keys asked for it 3-4 times a statement)."""
        if self._stamp is None:
            self._stamp = self.veil.design_file_stamp()
        return self._stamp

    @property
    def rights(self) -> grants.Rights:
        """This user's rights, read again whenever users.json changes (a GRANT elsewhere)."""
        path = self._users
        if path is None:
            return grants.Rights(admin=True)
        try:
            stat = path.stat()
            stamp: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = None
        if self._rights is None or self._rights[0] != stamp:
            entry = users.load(path.parent).get(self.user) if stamp is not None else None
            self._rights = (stamp, grants.rights_of(entry))
        return self._rights[1]

    def _authorize(self, tree: exp.Expr) -> None:
        grants.check(self.rights, tree, self.schema, self.user)

    # -- called by veil_wire --------------------------------------------------

    def run(self, sql: str, params: Sequence[tuple[str | None, int]]) -> list[Outcome]:
        with self._lock:
            self._stamp = None
            try:
                return self._guard(sql, lambda: self._run(sql, params))
            finally:
                self._native_call = None
                if self.native_points is not None:
                    self._native_state()

    def _native_state(self) -> None:
        """Tell the native plans whether they may run after this statement (``native``)."""
        assert self.native_points is not None
        # a result still streaming holds the local DuckDB, which native runs never touch
        self.native_points.set_open(not self.veil.transaction_failed)

    def native_write_begin(self, name: str, server_name: str) -> int | None:
        """Before a native point UPDATE of table ``name`` (``native``): its lock and its fresh
        row id (``native_plans.write_begin``), unless the transaction failed; None: the
        session runs the statement."""
        with self._lock:
            veil = self.veil
            if veil.transaction_failed:
                return None
            found = native_plans.write_begin(veil, name, server_name)
            self.written += veil.in_transaction and found is not None
            return found

    def native_write_end(self) -> None:
        """After a native point UPDATE outside a transaction: its table lock goes, as at the
        end of the session's own statements."""
        with self._lock:
            native_plans.write_end(self.veil)

    def native_failed(self, sqlstate: str, message: str, sql: str) -> None:
        """The server failed statement ``sql``, which the wire server ran natively: as for
        the session's own, its transaction fails (a read's failure changes nothing else)
        and the audit log records it."""
        with self._lock:
            observer = self.engine.observer if self.engine is not None else None
            if observer is not None:
                observer.watch(self.veil, self.user, "serve", sql, None).failed(sqlstate)
            self.veil.fail_transaction()
            if self.native_points is not None:
                self._native_state()
        raise WireError(sqlstate, message)

    def describe(
        self, sql: str, oids: Sequence[int]
    ) -> tuple[list[int], list[tuple[str, int]], bool]:
        """The statement's parameter types and result columns, and whether they stay the
        same until the design file changes (the wire server then keeps them, as
        ``_describe`` does, keyed by the file's modification time: ``design_path``)."""
        with self._lock:
            self._stamp = None
            described = self._guard(sql, lambda: self._describe(sql, oids))
            return (*described, _FETCH.match(sql.strip()) is None)

    @property
    def users_path(self) -> Path | None:
        """The users file whose changes change this user's rights (None: no users)."""
        return self._users

    @property
    def design_path(self) -> str:
        """The design file whose modification time versions the descriptions above."""
        return str(self.veil.client.design_path)

    def cancel(self) -> None:
        """A cancel request: stop the client-side DuckDB work of the running statement."""
        for connection in (self.veil.local, self.veil.catalog):
            connection.interrupt()

    def close(self) -> None:
        self._close_stream()
        try:
            self.veil.rollback()  # a connection that ends inside a transaction undoes it
        except VeilError:
            log.warning("rolling back a closed connection's transaction failed", exc_info=True)
        if self.engine is not None:
            if self.engine.metrics is not None:
                self.engine.metrics.closed()
            self.engine.release(self.veil)
        else:
            self.veil.close()

    def copy_in(self, data: bytes) -> int:
        """The rows of the pending COPY FROM STDIN: inserted through Veil as one INSERT."""
        with self._lock:
            pending, self.pending_copy = self.pending_copy, None
            if pending is None:
                raise WireError("08P01", "COPY data arrived without a COPY ... FROM STDIN")
            spec, names = pending
            assert spec.table is not None

            table = spec.table

            def insert() -> int:
                from veil.session.dml import insert_rows

                types = {c.name: c.type for c in self.veil.design.tables[table].columns}
                rows = copy.typed_rows(copy.read_rows(spec, data, names), types, self.zone)
                done = insert_rows(self.veil, table, spec.columns, rows).rowcount
                self.written += self.veil.in_transaction
                return done

            return int(self._guard(f"COPY {spec.table} FROM STDIN", insert))

    def copy_abort(self) -> None:
        self.pending_copy = None

    # -- statements -----------------------------------------------------------

    def _guard(self, sql: str, work: Any) -> Any:
        try:
            return self._answer(sql, work)
        except BaseException:
            self.veil.fail_transaction()  # as PostgreSQL: 25P02 until ROLLBACK
            raise

    def _answer(self, sql: str, work: Any) -> Any:
        try:
            return work()
        except WireError:
            raise
        except VeilError as exc:
            raise _input_error(wire_error(exc), exc) from None
        except duckdb.InterruptException:
            raise WireError("57014", "canceling statement due to user request") from None
        except duckdb.Error as exc:  # a catalogue query the catalogue DuckDB refused
            message = str(exc).split("\n")[0]
            raise WireError(query_sqlstate(message), message) from None
        except Exception as exc:
            log.exception("internal error serving %r", sql)
            raise WireError(
                "XX000", f"Veil failed on this statement ({type(exc).__name__})"
            ) from exc

    def _close_stream(self) -> None:
        """A result the client stopped reading: the session may run statements again."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _run(self, sql: str, params: Sequence[tuple[str | None, int]]) -> list[Outcome]:
        self._close_stream()
        self._shaping = None  # a shape is kept only from the one statement that found it
        texts = dialect.split(sql)
        if not texts:
            return [("empty",)]
        if params and len(texts) > 1:
            raise WireError("42601", "cannot insert multiple commands into a prepared statement")
        observer = self.engine.observer if self.engine is not None else None
        if not params and len(texts) == 1:
            found = self._shape_of(texts[0])
            if found is not None and observer is None:
                return [self._shaped(*found)]
            if found is not None and observer is not None:  # audited as any statement
                shaped = self._observed(
                    observer, texts[0], found[0].kind, lambda: self._shaped(*found), watch=True
                )
                return [_watched(*shaped)]
        bound = bool(params)
        self._native_call = (sql, params) if bound else None
        if observer is None:
            statements = [self._classified(t, bound=bound) for t in texts]
        else:
            statements = [
                self._observed(observer, t, None, lambda t=t: self._classified(t, bound=bound))
                for t in texts
            ]
        values = self._values(statements[0], params) if params else []
        # one statement streams its rows; several are answered whole, one after another
        single = len(texts) == 1
        if observer is None:
            return [self._statement(s, values, stream=single) for s in statements]
        return [
            _watched(
                *self._observed(
                    observer,
                    s.text,
                    s.kind,
                    lambda s=s: self._statement(s, values, stream=single),
                    watch=True,
                )
            )
            for s in statements
        ]

    def _shape_of(self, text: str) -> tuple[shapes.Translated, Normalized] | None:
        """``text``'s shape's kept translation (``shapes``) and its values; None: translate
        it (and, for a query or DML statement, keep its translation for the shape)."""
        shape = shapes.integers(text)
        if shape is None:
            return None
        key = (shape.text, self._design_stamp(), tuple(self.settings.items()))
        found = self._shapes.get(key)
        if found is None:
            self._shaping = (key, shape)
            return None
        return found, shape

    def _shaped(self, found: shapes.Translated, shape: Normalized) -> Outcome:
        """The statement of ``shape`` run as its shape's kept translation ``found``."""
        self.veil.check_transaction()
        self._authorize(found.tree)  # before anything is fetched or decrypted for this user
        if found.bound:  # its values as parameters (``shapes``)
            values = list(shape.values)
            outcome = self._sent(found.kind, found.tree, found.marked, values, values, stream=True)
            if self.native_points is not None:  # the wire server reads the shape itself
                native.offer_simple(self, shape, found.kind, found.marked, values, outcome)
            return outcome
        sql = shapes.written(found, shape)
        return self._sent(found.kind, found.tree, sql, [], [], stream=True)

    def _keep_shape(self, kind: str, tree: exp.Expr, sql: str) -> None:
        """The translation of the statement ``_shaped`` left to translate, kept for its shape."""
        shaping, self._shaping = self._shaping, None
        if shaping is None or kind not in ("query", "dml"):
            return
        key, shape = shaping
        translated = shapes.kept(kind, tree, sql, shape)
        if translated is not None:
            if len(self._shapes) >= _CACHED_STATEMENTS:
                self._shapes.clear()
            self._shapes[key] = translated

    def _observed(
        self, observer: Observer, text: str, kind: str | None, work: Any, *, watch: bool = False
    ) -> Any:
        """``work()`` for statement ``text``, recorded by ``observer`` if it fails (and
        with ``watch``, returned with the ``Watch`` that records it when it ends)."""
        seen = observer.watch(self.veil, self.user, "serve", text, kind)
        try:
            done = self._answer(text, work)
        except WireError as error:
            seen.failed(error.sqlstate)
            raise
        except BaseException:
            seen.failed("XX000")
            raise
        return (done, seen) if watch else done

    def _values(
        self, statement: dialect.Statement, params: Sequence[tuple[str | None, int]]
    ) -> list[object]:
        """The bound values, each untyped one read as the type its place in the statement takes.

        ``pgbench -M prepared`` leaves every parameter's type open and sends
        text: ``abalance + $1`` must add the integer 4045, not the string '4045'.
        """
        untyped = any(oid in _UNTYPED for _, oid in params)
        inferred = self._inferred(statement) if untyped and statement.tree is not None else {}
        values = [
            parameter_value(
                value, oid if oid not in _UNTYPED else _oid(inferred.get(number)), self.zone
            )
            for number, (value, oid) in enumerate(params, 1)
        ]
        if statement.tree is not None and self.zone != "UTC":
            return pg_types.zoned_parameters(statement.tree, values, self.zone)
        return values

    def _inferred(self, statement: dialect.Statement) -> dict[int, str]:
        """The types of the statement's parameters, from where each stands (once per design)."""
        key = ("types", statement.text, self._design_stamp())
        found = self._types.get(key)
        if found is None:
            assert statement.tree is not None
            found = dialect.parameter_types(statement.tree, self.schema)
            for cast in statement.tree.find_all(exp.Cast):  # CAST($1 AS uuid[]): the cast's
                if isinstance(cast.this, exp.Parameter) and cast.this.name.isdigit():
                    found.setdefault(int(cast.this.name), cast.to.sql(dialect="duckdb"))
            if len(self._types) >= _CACHED_STATEMENTS:
                self._types.clear()
            self._types[key] = found
        return found

    def _classified(self, text: str, *, bound: bool = False) -> dialect.Statement:
        """``text`` parsed, and for queries translated, once per design (drivers repeat SQL);
        DML too when ``bound`` (parameters come with it: pgbench's -M prepared parsed each
        of its writes on every Bind, ~1 ms of Python each)."""
        key = (text, self._design_stamp())
        found = self._translations.get(key) or (self._bound_dml.get(key) if bound else None)
        if found is None:
            found = dialect.classify(text)
            if found.kind == "query" and found.tree is not None:
                tree = dialect.integer_divisions(found.tree, self.schema)
                found = dialect.Statement(found.text, "query", dialect.output_names(tree))
                _kept(self._translations, key, found)
            elif found.kind == "dml" and bound:
                _kept(self._bound_dml, key, found)
        return found

    def _statement(
        self, statement: dialect.Statement, values: list[object], *, stream: bool = True
    ) -> Outcome:
        try:
            return self._statement_run(statement, values, stream=stream)
        finally:
            self._stamp = None  # it may have changed the design: the next one reads it again

    def _statement_run(
        self, statement: dialect.Statement, values: list[object], *, stream: bool
    ) -> Outcome:
        kind, tree = statement.kind, statement.tree
        if kind == "begin":
            if not self.veil.in_transaction:  # PostgreSQL only warns about a second BEGIN
                self.veil.begin()
                self.written = 0
            return ("command", "BEGIN", None)
        if kind == "commit":
            self.savepoints.clear()
            return ("command", "COMMIT" if self.veil.commit() else "ROLLBACK", None)
        if kind == "rollback":
            return self._rollback(statement.text)
        if kind in ("savepoint", "release"):
            return self._savepoint(kind, statement.text)
        if kind not in _OUTSIDE_TRANSACTIONS:
            self.veil.check_transaction()
        if kind in ("set", "reset"):
            if self.native_points is not None:
                self.native_points.bump()  # text forms may change with a setting
                self.native_tries.clear()  # each statement is planned and handed over again
            return self._set(statement.text, reset=kind == "reset")
        if kind == "show":
            return self._show(statement.text)
        if kind == "copy":
            return self._copy(statement.text)
        if kind == "declare":
            return self._declare(statement.text, values)
        if kind == "fetch":
            return self._fetch(statement.text)
        if kind == "close":
            name = _cursor_name(statement.text.split(None, 1)[1] if " " in statement.text else "")
            if name.lower() == "all":
                self.cursors.clear()
            elif self.cursors.pop(name, None) is None:
                raise WireError("34000", f'cursor "{name}" does not exist')
            return ("command", "CLOSE CURSOR", None)
        if kind == "ignore":
            return ("command", statement.text.split(None, 1)[0].upper(), None)
        if kind == "grant":
            return self._grant(statement.text)
        assert tree is not None
        if kind != "catalog":  # before anything is fetched or decrypted for this user
            self._authorize(tree)
        if kind in ("query", "dml") and values:  # the extended protocol's Bind
            translated, sql, order = self._prepared(statement)
            args = dialect.ordered(order, values)
            outcome = self._sent(kind, translated, sql, args, values, stream=stream)
            if kind == "query" and self._native_call is not None:
                native.offer(self, *self._native_call, sql, args, order, outcome)
            elif self._native_call is not None:  # an UPDATE or INSERT
                native.offer_change(self, *self._native_call, sql, args, order, outcome)
            return outcome
        tree = settings.answer_settings(tree, self.settings)
        if kind in ("query", "dml"):
            tree = pg_types.zoned_literals(tree, self.schema, self.zone)
            tree = array_literals(tree, self.schema)
        if kind == "catalog":
            sql = self._catalog_sql(tree, values)
            table = self.veil.catalog.sql(sql).to_arrow_table()
            return _rows(table, declared_oids(self.veil.catalog, sql, table.schema), zone=self.zone)
        if kind != "query":  # a query's tree comes translated (_classified)
            tree = dialect.integer_divisions(tree, self.schema)
        if isinstance(tree, DDL):  # the tree itself: DuckDB's SQL would lose WITH (...)
            statements.run_tree(self.veil, tree, statement.text)
            return ("command", _ddl_tag(tree), None)
        sql = dialect.bind(tree, values)
        if not values:
            self._keep_shape(kind, tree, sql)
        return self._sent(kind, tree, sql, [], values, stream=stream)

    def _sent(
        self,
        kind: str,
        tree: exp.Expr,
        sql: str,
        args: list[object],
        values: list[object],
        *,
        stream: bool,
    ) -> Outcome:
        """A query or DML statement run by the session: ``sql`` in DuckDB's dialect, its
        ``?`` markers bound to ``args`` (or its values written in: ``args`` empty).

        Bound by the session rather than written in, values meet the plan of the
        statement's shape (``veil.session.templates``): a prepared statement is planned
        once per design, and each Bind only encrypts its values.
        """

        def bound() -> str:  # for DESCRIBE, only when Arrow lost a column's type
            return dialect.bind(tree, values) if args else sql

        if kind == "query" and stream:  # rows leave as the local plan makes them
            self._close_stream()
            answer = self.veil.stream(sql, args or None)
            if isinstance(answer, Streamed):
                self._stream = answer
                oids = declared_oids(self.veil.catalog, bound, answer.schema)
                return _streamed(answer, oids, zone=self.zone)
            oids = declared_oids(self.veil.catalog, bound, answer.table.schema)
            return _rows(answer.table, oids, zone=self.zone)
        result = self.veil.run(sql, args or None)
        if kind == "dml":
            self.written += self.veil.in_transaction
            returned = returning_query(tree)
            if returned is not None:  # rows, and the command's tag
                described = dialect.bind(returned, values)
                oids = declared_oids(self.veil.catalog, described, result.table.schema)
                tag = "INSERT 0" if isinstance(tree, exp.Insert) else tree.key.upper()
                return (*_rows(result.table, oids, zone=self.zone), tag)
            return ("command", tree.key.upper(), result.rowcount)
        oids = declared_oids(self.veil.catalog, bound, result.table.schema)
        return _rows(result.table, oids, zone=self.zone)

    def _prepared(self, statement: dialect.Statement) -> tuple[exp.Expr, str, list[int]]:
        """``statement`` translated to DuckDB's dialect with its parameters as ``?`` markers."""
        key = (
            statement.text,
            self._design_stamp(),
            self.zone,
            tuple(self.settings.items()),
        )
        found = self._marked.get(key)
        if found is None:
            assert statement.tree is not None
            # a copy: the statement's tree is kept (``_classified``) and translating changes it
            tree = settings.answer_settings(statement.tree.copy(), self.settings)
            tree = pg_types.zoned_literals(tree, self.schema, self.zone)
            tree = array_literals(tree, self.schema)
            if statement.kind != "query":  # a query's tree comes translated (_classified)
                tree = dialect.integer_divisions(tree, self.schema)
            found = (tree, *dialect.marked(tree))
            if len(self._marked) >= _CACHED_STATEMENTS:
                self._marked.clear()
            self._marked[key] = found
        return found

    def _declare(self, sql: str, values: list[object]) -> Outcome:
        """DECLARE name CURSOR FOR query: the answer is kept for FETCH to read in parts."""
        found = _DECLARE.match(sql.strip().rstrip(";"))
        if found is None:
            raise WireError("42601", "syntax error in DECLARE ... CURSOR FOR query")
        # whole: a cursor outlives the statements that read it
        table = self._answer_whole(found["query"], values, "42P11")
        self.cursors[_cursor_name(found["name"])] = (table, 0)
        return ("command", "DECLARE CURSOR", None)

    def _answer_whole(self, query: str, values: list[object], refusal: str) -> pa.Table:
        """A query's whole answer (for cursors and COPY TO); other statements are refused."""
        statement = self._classified(query)
        tree = statement.tree
        if statement.kind not in ("query", "catalog") or tree is None:
            raise WireError(refusal, "this needs a query (SELECT, WITH, VALUES)")
        if statement.kind == "catalog":
            return self.veil.catalog.sql(self._catalog_sql(tree, values)).to_arrow_table()
        self._authorize(tree)
        table: pa.Table = self.veil.run(dialect.bind(tree, values)).table
        return table

    def _grant(self, sql: str) -> Outcome:
        """GRANT or REVOKE (``veil.serve.grants``): administrators only, as table owners."""
        if not self.rights.admin:
            raise WireError(
                "42501",
                f'permission denied: only an administrator grants, and "{self.user}" is not one',
            )
        statement = grants.parse_grant(sql, self.schema)
        client_dir = self.engine.client_dir if self.engine is not None else None
        known = users.load(client_dir) if client_dir is not None else {}
        for name in statement.users:
            if name not in known:
                raise WireError("42704", f'role "{name}" does not exist (veil user add)')
        for name in statement.users:

            def changed(entry: dict[str, object] | None) -> dict[str, object]:
                rights = grants.rights_of(entry)
                if rights.admin:
                    return dict(entry or {})  # an administrator has every right already
                for table in statement.tables:
                    for privilege, columns in statement.privileges:
                        if statement.grant:
                            rights.grant(privilege, table, columns)
                        else:
                            rights.revoke(privilege, table, columns)
                return {**(entry or {}), **rights.to_json()}

            assert client_dir is not None
            users.change(client_dir, name, changed)
        return ("command", "GRANT" if statement.grant else "REVOKE", None)

    def _catalog_sql(self, tree: exp.Expr, values: list[object]) -> str:
        """A catalogue query as the catalogue DuckDB runs it, for this session's user."""
        answered = settings.answer_settings(tree, self.settings)
        prepared = catalog.prepare(
            dialect.integer_divisions(answered, self.schema), self.user, self.database
        )
        self.veil.admit(prepared, catalog=True)
        return dialect.bind(dialect.output_names(prepared), values)

    def _fetch(self, sql: str) -> Outcome:
        found = _FETCH.match(sql.strip())
        if found is None:
            raise WireError("0A000", "Veil's FETCH is FETCH [FORWARD] [n | ALL] FROM cursor")
        name = _cursor_name(found["name"])
        if name not in self.cursors:
            raise WireError("34000", f'cursor "{name}" does not exist')
        table, position = self.cursors[name]
        count = found["count"] or "1"
        end = len(table) if count.upper() == "ALL" else min(len(table), position + int(count))
        self.cursors[name] = (table, end)
        if found["verb"].upper() == "MOVE":
            return ("command", "MOVE", end - position)
        return _rows(table.slice(position, end - position), zone=self.zone)

    def _copy(self, sql: str) -> Outcome:
        spec = copy.parse(sql)
        if spec.incoming:
            table = self.veil.design.tables.get(spec.table or "")
            if table is None:
                raise WireError("42P01", f'relation "{spec.table}" does not exist')
            names = spec.columns or [c.name for c in table.columns]
            for name in names:
                if not self.rights.allows("INSERT", table.name, name):
                    raise WireError(
                        "42501",
                        f"permission denied for column {name} of table {table.name} (INSERT)",
                    )
            self.pending_copy = (spec, names)
            return ("copy_in", len(names))
        query = spec.query or f"SELECT {', '.join(spec.columns or ['*'])} FROM {spec.table}"
        table = self._answer_whole(query, [], "0A000")
        # every line made before the first is sent: a failure is then a plain error
        lines = list(copy.lines(spec, table, self.zone))
        return ("copy_out", table.num_columns, iter(lines))

    def _rollback(self, sql: str) -> Outcome:
        words = sql.upper().split()
        if "TO" in words:  # ROLLBACK TO [SAVEPOINT] name: the transaction goes on
            return self._savepoint("rollback_to", sql)
        self.veil.rollback()
        self.written = 0
        self.savepoints.clear()
        return ("command", "ROLLBACK", None)

    def _savepoint(self, kind: str, sql: str) -> Outcome:
        """SAVEPOINT, RELEASE and ROLLBACK TO: the server's own, or counted where it has none.

        DuckDB has no savepoints: one is a mark of how many writes the transaction
        had, and ROLLBACK TO one with writes after it is refused (the transaction
        then fails, as any failed statement fails it).
        """
        name = _savepoint_name(sql)
        if not self.veil.in_transaction:
            if kind == "savepoint":
                raise WireError("25P01", f"{kind.upper()} can only be used in transaction blocks")
            raise WireError("3B001", f'savepoint "{name}" does not exist')
        if kind != "savepoint" and name not in self.savepoints:
            self.veil.fail_transaction()
            raise WireError("3B001", f'savepoint "{name}" does not exist')
        verb = {"savepoint": "SAVEPOINT", "release": "RELEASE SAVEPOINT"}.get(
            kind, "ROLLBACK TO SAVEPOINT"
        )
        if self.veil.backend.savepoints:
            self.veil.savepoint(name, verb)
        elif kind == "rollback_to" and self.written > self.savepoints[name]:
            self.veil.fail_transaction()
            raise WireError(
                "0A000",
                f"ROLLBACK TO SAVEPOINT cannot undo the {self.written - self.savepoints[name]} "
                "write(s) since the savepoint on a DuckDB server, which has no savepoints; "
                "ROLLBACK the whole transaction",
            )
        elif kind == "rollback_to":
            self.veil.savepoint_restored()
        if kind == "savepoint":
            self.savepoints[name] = self.written
        elif kind == "release":
            self.savepoints = {
                k: v for k, v in self.savepoints.items() if v < self.savepoints[name]
            }
            return ("command", "RELEASE", None)
        # the wire sends "ROLLBACK TO" as PostgreSQL's ROLLBACK, the transaction still open
        return ("command", "SAVEPOINT" if kind == "savepoint" else "ROLLBACK TO", None)

    def _set(self, sql: str, *, reset: bool) -> Outcome:
        before = {name: self.settings.get(name) for name in _REPORTED}
        if reset:
            self._reset(sql)
        else:
            self._assign(sql)
        changed = [
            (shown, self.settings[name])
            for name, shown in _REPORTED.items()
            if self.settings.get(name) != before[name] and name in self.settings
        ]
        return ("command", "RESET" if reset else "SET", None, changed)

    def _reset(self, sql: str) -> None:
        name = sql.split(None, 1)[1].strip().lower() if len(sql.split()) > 1 else "all"
        name = name.rstrip(";").strip()
        settings.check_settable(name)
        if name == "all":
            self.settings = dict(_DEFAULT_SETTINGS)
            return
        self.settings.pop(name, None)
        if name in _DEFAULT_SETTINGS:
            self.settings[name] = _DEFAULT_SETTINGS[name]

    def _assign(self, sql: str) -> None:
        words = sql.split()
        if len(words) > 1:
            settings.check_settable(words[1].rstrip(";"))  # SET VARIABLE, SET threads...
        spoken = _SET_TIME_ZONE.match(sql.strip())
        found = _SET.match(sql.strip())
        if spoken is not None:
            name, value = "timezone", spoken["value"]
        elif found is not None:
            name, value = found["name"].lower(), found["value"]
        else:  # SET TRANSACTION ..., SET NAMES ...: accepted, nothing to keep
            return
        value = value.strip().rstrip(";").strip()
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1].replace("''", "'")
        if value.upper() in ("DEFAULT", "LOCAL"):
            self.settings.pop(name, None)
            if name in _DEFAULT_SETTINGS:
                self.settings[name] = _DEFAULT_SETTINGS[name]
            return
        if name == "timezone":
            value = settings.time_zone(value)
        self.settings[name] = value

    def _show(self, sql: str) -> Outcome:
        name = _setting_name(sql)
        if name == "all":
            table = pa.table(
                {
                    "name": list(self.settings),
                    "setting": list(self.settings.values()),
                    "description": [""] * len(self.settings),
                }
            )
            return _rows(table)
        if name not in self.settings:
            raise WireError("42704", f'unrecognized configuration parameter "{name}"')
        return _rows(pa.table({_REPORTED.get(name, name): [self.settings[name]]}))

    def _describe(self, sql: str, oids: Sequence[int]) -> tuple[list[int], list[tuple[str, int]]]:
        found = _FETCH.match(sql.strip())
        if found is not None and found["verb"].upper() == "FETCH":
            cursor = self.cursors.get(_cursor_name(found["name"]))
            fields = (
                [] if cursor is None else [(f.name, oid_of_arrow(f.type)) for f in cursor[0].schema]
            )
            return [], fields
        key = (sql, tuple(oids), self._design_stamp())
        if key not in self._descriptions:
            # the catalogue it is described on follows other connections' DDL, as a run
            # does: described on the old one, a query's rows had more columns than said
            self.veil.follow_design()
            if len(self._descriptions) >= _CACHED_STATEMENTS:
                self._descriptions.clear()
            self._descriptions[key] = self._describe_anew(sql, oids)
        return self._descriptions[key]

    def _describe_anew(
        self, sql: str, oids: Sequence[int]
    ) -> tuple[list[int], list[tuple[str, int]]]:
        texts = dialect.split(sql)
        if len(texts) != 1:
            return list(oids), []
        statement = self._classified(texts[0])
        tree = statement.tree
        count = dialect.placeholders(tree) if tree is not None else 0
        inferred = dialect.parameter_types(tree, self.schema) if tree is not None else {}
        params = [
            oids[i] if i < len(oids) and oids[i] not in _UNTYPED else _oid(inferred.get(i + 1))
            for i in range(count)
        ]
        if statement.kind == "show":
            name = _setting_name(texts[0])
            return params, [(_REPORTED.get(name, name), TEXT)]
        returned = returning_query(tree) if statement.kind == "dml" and tree is not None else None
        if returned is not None:
            tree = returned  # the rows INSERT/UPDATE/DELETE ... RETURNING makes
        elif statement.kind not in ("query", "catalog") or tree is None:
            return params, []
        nulls: list[object] = [None] * count
        catalogue = statement.kind == "catalog"
        if not catalogue:
            tree = settings.answer_settings(tree, self.settings)
            self.veil.admit(tree)
        described = self._catalog_sql(tree, nulls) if catalogue else dialect.bind(tree, nulls)
        rows = self.veil.catalog.execute(f"DESCRIBE {described}").fetchall()
        return params, [(str(name), oid_of_duckdb(str(kind))) for name, kind, *_ in rows]


# a value DuckDB could not read as its type: PostgreSQL's invalid_text_representation
_CONVERSION = re.compile(
    r"Conversion Error|invalid input syntax|unsupported Unicode escape", re.IGNORECASE
)
_DATETIME = re.compile(r"\b(?:timestamp|date|time|interval)\b|extract specifier", re.IGNORECASE)


def _kept(cache: dict[Any, Any], key: Any, value: Any) -> None:
    """``value`` kept under ``key`` in a per-connection cache of at most _CACHED_STATEMENTS."""
    if len(cache) >= _CACHED_STATEMENTS:
        cache.clear()
    cache[key] = value


def _input_error(error: WireError, exc: VeilError) -> WireError:
    """A bad value's error with PostgreSQL's SQLSTATE: 22P02, 22007 (dates, times and
    intervals) or 22023 (bytea's hex digits), not the general 42000."""
    if error.sqlstate not in ("42000", "XX000") or not _CONVERSION.search(error.message):
        return error
    if "unsupported Unicode escape" in error.message:
        code = "22P05"  # untranslatable_character
    elif "hex escape" in error.message:
        code = "22023"  # invalid_parameter_value, as PostgreSQL's bytea input says
    elif _DATETIME.search(error.message):
        code = "22007"  # invalid_datetime_format
    else:
        code = "22P02"
    return WireError(code, error.message, hint=error.hint, position=error.position)


def _ddl_tag(tree: Any) -> str:
    """PostgreSQL's command tag: CREATE TABLE, DROP TABLE, ALTER TABLE, TRUNCATE TABLE..."""
    if isinstance(tree, exp.TruncateTable):
        return "TRUNCATE TABLE"
    verb = {exp.Create: "CREATE", exp.Drop: "DROP", exp.Alter: "ALTER"}[type(tree)]
    kind = str(tree.args.get("kind") or "TABLE").upper()
    return f"{verb} {kind}" if verb != "CREATE" or not tree.args.get("expression") else "SELECT"


def _cursor_name(text: str) -> str:
    text = text.strip().rstrip(";").strip()
    return text[1:-1] if len(text) > 1 and text[0] == text[-1] == '"' else text.lower()


def _savepoint_name(sql: str) -> str:
    return sql.rstrip(";").split()[-1].strip('"').lower()


# SHOW's spellings of settings with spaces in their names
_SPOKEN = {"transaction isolation level": "transaction_isolation", "time zone": "timezone"}


def _setting_name(sql: str) -> str:
    """The setting ``SHOW name`` asks for, lower-cased (``SHOW TIME ZONE`` is ``timezone``)."""
    spoken = " ".join(sql.rstrip(";").split()[1:]).lower()
    return _SPOKEN.get(spoken, spoken)


def _streamed(answer: Streamed, oids: list[int] | None = None, *, zone: str = "UTC") -> Outcome:
    oids = oids or [oid_of_arrow(f.type) for f in answer.schema]
    fields = [(f.name, oid) for f, oid in zip(answer.schema, oids, strict=True)]

    def batches() -> Iterator[tuple[int, list[text.Column]]]:
        try:
            for batch in answer.batches():
                yield text.encode(batch, zone)
        except VeilError as exc:  # a failure after the first rows left
            raise wire_error(exc) from None

    return ("rows", fields, batches())


def _watched(outcome: Outcome, watch: Watch) -> Outcome:
    """``outcome``, recorded by ``watch``: at once, or once its rows or lines are sent."""
    if outcome[0] == "rows" and isinstance(outcome[2], list):  # encoded whole (``_rows``)
        watch.done(sum(rows for rows, _ in outcome[2]))
        return outcome
    if outcome[0] == "rows":
        return (
            outcome[0],
            outcome[1],
            watch.counted(outcome[2], lambda batch: batch[0]),
            *outcome[3:],
        )
    if outcome[0] == "copy_out":
        return (outcome[0], outcome[1], watch.counted(outcome[2], lambda _line: 1))
    watch.done(outcome[2] if outcome[0] == "command" else None)
    return outcome


def _rows(table: pa.Table, oids: list[int] | None = None, *, zone: str = "UTC") -> Outcome:
    """A whole answer's rows: encoded now, as a list, when they are one batch (a point
    query's), which the wire server sends without calling back into Python for each
    batch (two calls, ~0.1 ms each with the thread and GIL handoffs); else lazily."""
    oids = oids or [oid_of_arrow(f.type) for f in table.schema]
    fields = [(f.name, oid) for f, oid in zip(table.schema, oids, strict=True)]
    if table.num_rows <= text.BATCH_ROWS:
        return ("rows", fields, list(text.batches(table, zone)))
    batches: Iterator[tuple[int, list[text.Column]]] = text.batches(table, zone)
    return ("rows", fields, batches)


def _oid(sql_type: str | None) -> int:
    """The OID a parameter of ``sql_type`` is read as; text where the context named none."""
    return TEXT if sql_type is None else oid_of_duckdb(sql_type)
