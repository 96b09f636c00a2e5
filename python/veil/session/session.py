"""A Veil session: one client directory, one server, one local DuckDB.

``Session.run(sql, params)`` is the whole query path: parse, bind parameters,
check the query against the plaintext schema (an empty copy of it lives in a
local "catalog" DuckDB, whose binder gives precise errors before anything is
sent), plan the split, run each scan's RemoteSQL, decrypt, register the
plaintext results in the local DuckDB and run the local plan there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.backends import Backend, BackendError, connect_existing, n_square_bytes
from veil.ciphers.cache import CipherCache
from veil.ciphers.cipher import ColumnCipher
from veil.ciphers.hom_group import OverflowedRowsError
from veil.crypto.keys import MasterKey
from veil.design.model import DET, Encryption, PhysicalDesign, TableDesign
from veil.encoding import CONSTANT_FAMILIES, SqlType, encode_scalar, exact_reader
from veil.errors import InternalError, ParameterError, VeilError
from veil.exec.bind import KeyMemo, fetch_order, key_filters
from veil.exec.direct import decrypted_early, projected, projection
from veil.exec.fetch import run_joined, run_scan
from veil.exec.joined_sums import RepeatedRowsError
from veil.exec.late import RAW, decrypt_outputs, decrypted_schema, register_late_keys
from veil.exec.local_duckdb import local_duckdb, local_engine, memory_limit_bytes
from veil.exec.local_run import local_arrow
from veil.exec.one_table import joined_tables, one_table_per_join, unread_members
from veil.exec.server import FetchStats, shared_fetches
from veil.session.clientdir import ClientDir, open_client_dir
from veil.session.defaults import catalog_column, restart_statement, with_sequence_values
from veil.session.onions import (
    check_snapshot,
    has_wrapped,
    peel_layers,
    peeled_view,
    reconcile,
    wanted_peels,
)
from veil.session.peel_marks import wait_for_peels
from veil.session.plan_cache import CachedPlan, Key, PlanCache, plan_key, shape_key
from veil.session.result import (
    STREAM_BATCH_ROWS,
    Result,
    Streamed,
    duckdb_message,
    local_error,
)
from veil.session.row_locks import lock_selected
from veil.session.sealed_plans import SealedPlans
from veil.session.table_locks import SharedLocks
from veil.session.templates import (
    Recorder,
    Template,
    binds_as_written,
    fast_exact,
    fingerprint,
    shape,
    substituted,
)
from veil.sql import fallbacks
from veil.sql.catalog_queries import reads_only_catalog
from veil.sql.errors import (
    ActiveTransactionError,
    InFailedTransactionError,
    OutOfMemoryError,
    QueryCancelledError,
    QueryError,
    UnsupportedStatementError,
)
from veil.sql.functions import is_repeatable
from veil.sql.literals import normalized
from veil.sql.parse import bind_parameters, parse_statement
from veil.sql.plan import Scan, SplitPlan
from veil.sql.remote import Extras, param
from veil.sql.sandbox import check_text, check_tree
from veil.sql.slots import PARAM, bound
from veil.sql.text import NOT_PLAIN, plain_value, text

log = logging.getLogger(__name__)
_IDLE, _OPEN, _FAILED = "idle", "open", "failed"  # an explicit transaction's states
_UNKNOWN_TABLE = re.compile(r'Table with name (\S+) does not exist!(?: Did you mean "([^"]+)"\?)?')
T = TypeVar("T")
# the passes that sum on the server (ASHE, packed HOM, sums over server joins)
_SERVER_SUMS = frozenset({"pushdown_aggregates", "pushdown_join_aggregates"})
# the user asked to stop, or the local engine is out of memory (fetching all needs more)
_NO_FALLBACK = (duckdb.InterruptException, duckdb.OutOfMemoryException, OutOfMemoryError)
# servers whose statements take parameters (not written into the text) when one is a slot
_PARAMETERS_SENT = frozenset({"duckdb", "postgres"})
# DET ciphertexts of slot values a session keeps (``Session._slot_ciphertext``)
_DET_SLOTS_KEPT = 4096


class Session:
    """One client directory's statements.

    ``external_access``: the application's own process reads files through
    SQL (``read_csv``, ``read_parquet``...) in the local engine; off by
    default, and never for ``veil serve``, whose users must not reach the
    trusted side's files (``veil.sql.sandbox``).

    ``memory_limit``: what the process's local engine may use to finish plans
    (``4GB``, ``25%``; by default ``VEIL_MEMORY_LIMIT``, else half the machine's
    memory: ``veil.exec.local_duckdb``). Past it DuckDB spills to disk, and what
    cannot spill fails with ``OutOfMemoryError``.
    """

    def __init__(
        self,
        client_dir: str | os.PathLike[str],
        *,
        external_access: bool = False,
        memory_limit: str | None = None,
    ):
        self.client: ClientDir = open_client_dir(client_dir)
        # the design file's path as a string: its stamp is read several times a statement,
        # and a Path built and stat-ed each time cost ~25 Path objects a TPC-B transaction
        self._design_file = os.fspath(self.client.design_path)
        # the key (both keys while a re-key runs: ``veil.keys.ring``) and the design
        self.master: MasterKey
        self.design: PhysicalDesign
        # taken before the design is read: a design saved in between is read again later
        self._design_stamp = _stamp(self._design_file)
        self.master, self.design = self.client.following()
        # a connection of its own (an embedded DuckDB file is opened once per
        # process and shared by its connections: ``veil.backends.duckdb``), so
        # sessions in several threads each run their own statements and transactions
        self.backend: Backend = connect_existing(self.client.server_url())
        self.ciphers = CipherCache.of_client_dir(self.client.path, self.master)
        self.hom_pushdown = _hom_pushdown()
        self.join_sums = True  # until a server join repeats a summed row
        self.external_access = external_access
        # the process's local engine, under its memory limit (``veil.exec.local_duckdb``)
        self.memory_limit = memory_limit_bytes(memory_limit)
        self.local = local_engine(external_access=external_access, memory_limit=memory_limit)
        self._catalog: duckdb.DuckDBPyConnection | None = None  # made on first use
        self._views: set[str] = set()  # local views over registered tables, dropped with them
        self._transaction = _IDLE  # an explicit transaction's state (BEGIN ... COMMIT)
        # tables this session writes in its transaction (``veil.session.table_locks``)
        self.table_locks = SharedLocks(self.client.path)
        self.writes_running = 0  # nested: a foreign key's action inside its statement's write
        self._owners: dict[str, TableDesign] = {}
        # DET ciphertexts of recent slot values, by cipher (``_slot_ciphertext``)
        self._det_slots: dict[tuple[int, type, int | bytes], tuple[object, int | bytes]] = {}
        # constants' encodings, within one planning (``current_date`` changes between plans)
        self._encoded: dict[tuple[str, str], int | bytes | None] = {}
        # whether the last planning left out peels because a transaction was open
        self._peels_skipped = False
        # while a statement with parameters is planned: the slots it hands out (``templates``)
        self._recorder: Recorder | None = None
        # plans shared by this process's sessions of the directory (``plan_cache``), and
        # an open transaction's own
        settings = (self.client.design_path, self.client.server_path)
        sealed = SealedPlans.of(self.client.path, self.master, settings)
        self.plans = PlanCache.shared(self.client.path, external_access, sealed)
        self._transaction_plans = PlanCache()
        self.peeling: set[str] = set()  # tables this session is peeling (``peel_marks``)
        if wait_for_peels(self, self.design):  # another's peel was under way: it is done now
            self.reload_design()
            return
        self.refresh_catalog()
        self._reconcile()

    def reload_design(self) -> None:
        """Read the design again (DDL here, or another session, changed it), once no other
        session's peel is under way in it (``veil.session.peel_marks``)."""
        before = self.design
        while True:
            self._design_stamp = _stamp(self._design_file)  # before: as in ``__init__``
            master, self.design = self.client.following(self.master)
            if not wait_for_peels(self, self.design):
                break
        if self.in_transaction and self.backend.dialect == "duckdb":
            # its reads see the server as the transaction began (DuckDB's snapshot)
            check_snapshot(self, before, self.design)
        if master is not self.master:  # a re-key began or ended: its keys, and their ciphers
            self.master = master
            self.ciphers = CipherCache.of_client_dir(self.client.path, master)
        self.plans.clear()  # their key holds the version too: this only frees them
        self.refresh_catalog()
        self._reconcile()

    def _reconcile(self) -> None:
        """Layers a crashed peel took off on the server come off the design too."""
        if not has_wrapped(self.design):
            return
        try:
            reconcile(self)
        except BackendError:
            # a table rebuilt since the design was read (ALTER, TRUNCATE, a re-key's or a
            # redesign's swap) has dropped the layers table it named: read the new design
            if _stamp(self._design_file) == self._design_stamp:
                raise
            self.reload_design()

    def design_file_stamp(self) -> int:
        """Changes whenever the client directory's design does (DDL, a load)."""
        return _stamp(self._design_file)

    def follow_design(self) -> None:
        """Sessions over one client directory see each other's DDL before each statement."""
        if _stamp(self._design_file) != self._design_stamp:
            self.reload_design()

    @property
    def catalog(self) -> duckdb.DuckDBPyConnection:
        """An empty copy of the plaintext schema, whose binder checks queries; made on first
        use: a fresh process running a plan an earlier one kept never needs it (~30 ms)."""
        if self._catalog is None:
            self._catalog = local_duckdb(external_access=self.external_access)
            self._fill_catalog(self._catalog)
        return self._catalog

    def refresh_catalog(self) -> None:
        """Rebuild the empty plaintext schema the binder checks queries against."""
        self._transaction_plans.clear()
        self._owners.clear()
        for table in self.design.tables.values():
            self._owners.update({e.name: table for e in table.encryptions})
        if self._catalog is not None:
            self._fill_catalog(self._catalog)

    def _fill_catalog(self, catalog: duckdb.DuckDBPyConnection) -> None:
        for (name,) in catalog.sql("SELECT table_name FROM duckdb_tables()").fetchall():
            if name not in self.design.tables:
                catalog.execute(f'DROP TABLE "{name}"')
        for name, table in self.design.tables.items():
            columns = ", ".join(catalog_column(c) for c in table.columns)
            numbered = {c.name for c in table.columns if c.identity}  # null until numbered
            for key in table.keys:  # information_schema shows them
                primary = key == table.primary_key() and not numbered & set(key)
                kind = "PRIMARY KEY" if primary else "UNIQUE"
                quoted = ", ".join(f'"{c}"' for c in key)
                columns += f", {kind} ({quoted})"
            catalog.execute(f'CREATE OR REPLACE TABLE "{name}" ({columns})')

    def close(self) -> None:
        if self.in_transaction:  # closing without COMMIT undoes the transaction
            with contextlib.suppress(VeilError):
                self.rollback()
        self.table_locks.close()  # releases every lock and closes the files
        self.plans.save()  # for the next process (``veil.session.sealed_plans``)
        self.backend.close()
        self.local.close()
        if self._catalog is not None:
            self._catalog.close()

    # -- statements -----------------------------------------------------------

    def run(self, sql: str, params: list[object] | tuple[object, ...] | None = None) -> Result:
        """Run one statement; every failure reaches the caller as a ``VeilError``."""
        return self.guarded(sql, lambda: self._run(sql, params))

    def guarded(self, sql: str, work: Callable[[], T]) -> T:
        """``work()`` on ``sql``, with every failure turned into a ``VeilError``.

        Inside a transaction, a failure fails the transaction (as PostgreSQL's
        does): every statement after it is refused until ROLLBACK.
        """
        self.check_transaction()
        try:
            return self._guarded(sql, work)
        except BaseException:
            self.fail_transaction()
            raise

    def _guarded(self, sql: str, work: Callable[[], T]) -> T:
        try:
            return work()
        except VeilError:
            raise
        except duckdb.InterruptException:
            raise QueryCancelledError(
                "the statement was cancelled; nothing it would have changed was changed"
            ) from None
        except duckdb.Error as exc:
            raise local_error(exc, self._in_user_terms(duckdb_message(exc))) from None
        except MemoryError:
            raise OutOfMemoryError(
                "the client ran out of memory for this query's fetched rows; nothing was "
                "changed. Make the query fetch less (filters, fewer columns)"
            ) from None
        except Exception as exc:
            log.exception("internal error running %r", sql)
            raise InternalError(
                f"Veil failed on this statement ({type(exc).__name__}: {exc}); nothing was "
                "changed on the server. Please report it with the statement"
            ) from exc

    # -- transactions -----------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        """Whether an explicit transaction (BEGIN ... COMMIT) is open, failed or not."""
        return self._transaction != _IDLE

    def begin(self) -> None:
        """Start a transaction: the statements until ``commit`` are one server transaction.

        Reads see the transaction's own writes; ``rollback`` undoes them all.
        Row ids are taken from the table's counter outside it (a rolled-back
        insert's ids are skipped, never reused), and a query that would peel an
        onion layer runs that part on the client instead (a peel commits on its
        own). DDL commits the transaction first (``veil.statements``).
        """
        if self.in_transaction:
            raise ActiveTransactionError("there is already a transaction in progress")
        self._guarded("BEGIN", self.backend.begin)
        self._transaction = _OPEN
        self._transaction_plans = PlanCache()

    def commit(self) -> bool:
        """End the transaction, keeping its writes; False if it had failed (then rolled back)."""
        if self._transaction == _FAILED:
            self.rollback()
            return False
        if self._transaction == _OPEN:
            self._transaction = _IDLE
            try:
                self._guarded("COMMIT", self.backend.commit)
            finally:
                self.table_locks.release()
        return True

    def rollback(self) -> None:
        """End the transaction, undoing its writes (nothing to do outside one)."""
        if self._transaction == _IDLE:
            return
        self._transaction = _IDLE
        self._transaction_plans.clear()  # plans made inside saw its writes' statistics
        try:
            self._guarded("ROLLBACK", self.backend.rollback)
        finally:
            self.table_locks.release()

    def savepoint(self, name: str, verb: str = "SAVEPOINT") -> None:
        """SAVEPOINT, ROLLBACK TO SAVEPOINT or RELEASE SAVEPOINT ``name`` (servers that have them)."""
        if verb.startswith("ROLLBACK") and self._transaction == _FAILED:
            self._transaction = _OPEN  # the savepoint's state comes back, as in PostgreSQL
        self.guarded(verb, lambda: self.backend.savepoint(name, verb))
        if verb.startswith("ROLLBACK"):
            self._transaction_plans.clear()

    def savepoint_restored(self) -> None:
        """A ROLLBACK TO a savepoint with nothing to undo (a server without savepoints)."""
        if self._transaction == _FAILED:
            self._transaction = _OPEN

    def check_transaction(self) -> None:
        if self._transaction == _FAILED:
            raise InFailedTransactionError(
                "current transaction is aborted, commands ignored until end of transaction "
                "block: ROLLBACK it (a COMMIT also rolls it back)"
            )

    @property
    def transaction_failed(self) -> bool:
        """Whether the open transaction failed (its statements wait for ROLLBACK)."""
        return self._transaction == _FAILED

    @property
    def design_version(self) -> int:
        """The design file's stamp when the session last read it (its plans are of it)."""
        return self._design_stamp

    def fail_transaction(self) -> None:
        """A statement of the open transaction failed: the rest wait for ROLLBACK."""
        if self._transaction == _OPEN:
            self._transaction = _FAILED

    def _in_user_terms(self, message: str) -> str:
        """An unknown table's error names the user's tables, never DuckDB's internal ones."""
        found = _UNKNOWN_TABLE.search(message)
        if found is None:
            return message
        name, suggestion = found.groups()
        tables = sorted(self.design.tables)
        if suggestion is not None and suggestion in tables:
            return f"table {name} does not exist; did you mean {suggestion}?"
        listing = ", ".join(tables) if tables else "none yet"
        return f"table {name} does not exist; the tables are: {listing}"

    def _run(
        self,
        sql: str,
        params: list[object] | tuple[object, ...] | None,
        *,
        as_written: bool = False,
    ) -> Result:
        self.follow_design()
        if restart_statement(self, sql):  # ALTER ... RESTART: a statement sqlglot cannot read
            return Result(pa.table({}), -1)
        started = time.perf_counter()
        key = self._plan_key(sql, params)
        cached = self._cached(key)
        if cached is not None:  # the lookup is the plan's time, not the answer after it
            looked = time.perf_counter() - started
            return _timed(self._cached_answer(key, cached), plan=looked, hit=True)
        # literals as parameters (``veil.sql.literals``): the plan of the statement's shape
        normal = None if params or as_written else normalized(sql)
        original = sql
        if normal is not None:
            sql, params = normal.text, normal.values
            key = self._plan_key(sql, params)
            cached = self._cached(key)
            if cached is not None:
                looked = time.perf_counter() - started
                return _timed(self._cached_answer(key, cached), plan=looked, hit=True)
        kinds = shape(params)
        shaped = None if kinds is None else self._shape_key(sql, kinds)
        if shaped is not None:
            answered = self._from_template(shaped, params or (), started)
            if answered is None:  # an UPDATE/DELETE of a shape planned before
                scope = self.shape_scope
                written = None if normal is None else lambda: binds_as_written(original, normal)
                from veil.session import point_writes  # (imported when first needed)

                answered = point_writes.answer(self, sql, params or (), shaped, scope, written)
            if answered is not None:
                return answered
        if normal is not None and not binds_as_written(original, normal):
            return self._run(original, None, as_written=True)
        tree = self.admitted(sql, params)
        parsed = time.perf_counter()
        if reads_only_catalog(tree):
            table = self.catalog.sql(tree.sql(dialect="duckdb")).to_arrow_table()
            return Result(table, len(table))
        if isinstance(tree, exp.Insert | exp.Update | exp.Delete):
            return _timed(self.write(tree), parse=parsed - started)
        if not isinstance(tree, exp.Query | exp.Pivot):
            raise UnsupportedStatementError(
                f"Veil runs queries (SELECT, WITH, set operations, PIVOT) and INSERT/UPDATE/DELETE; "
                f"not {tree.key.upper()} statements"
            )
        if isinstance(tree, exp.Select) and tree.args.get("locks"):
            return self.query(lock_selected(self, tree))  # never cached: it locks each time
        recorder = None if shaped is None else Recorder(_markers(tree))
        with self.recording(recorder):
            planned = CachedPlan(self.describe(tree), self.plan(tree), tree)
        plan_seconds = time.perf_counter() - parsed
        result = _timed(self._answer(planned), parse=parsed - started, plan=plan_seconds, hit=False)
        # kept only if it ran as planned (a fallback may have been transient) and
        # means the same next time (now(), random(): planned every run)
        if result.plan is planned.plan and is_repeatable(tree):
            # under the design it was planned on: a peel while planning moved the version
            key = self._plan_key(sql, params)
            kept = CachedPlan(result.table.column_names, planned.plan, tree)
            self._keep(key, kept)
            if shaped is not None and recorder is not None and recorder.complete:
                self._template(
                    self._shape_key(sql, kinds or ()), kept, recorder, result.stats, params or ()
                )
        return result

    def _shape_key(self, sql: str, kinds: tuple[tuple[str, str], ...]) -> Key:
        return shape_key(sql, kinds, self._plan_key(sql, None)[2])

    def shape_key(self, sql: str, kinds: tuple[tuple[str, str], ...]) -> Key:
        """The key of ``sql``'s shape with parameters of ``kinds`` (``veil.session.templates``)."""
        return self._shape_key(sql, kinds)

    @property
    def shape_scope(self) -> tuple[str, bool]:
        """What a process's kept write shapes are kept apart by (``point_writes``)."""
        return (str(self.client.path), self.external_access)

    def plan_of_shape(self, sql: str, kinds: tuple[tuple[str, str], ...]) -> CachedPlan | None:
        """The plan kept for ``sql``'s shape with parameters of ``kinds`` (its template, if
        one), under the design now (``veil.session.native_plans``)."""
        return self._cached(self._shape_key(sql, kinds), count=False)

    def owner_of(self, enc: Encryption) -> TableDesign:
        """The table whose server column ``enc`` is."""
        return self._owners[enc.name]

    def _template(
        self,
        key: Key,
        kept: CachedPlan,
        recorder: Recorder,
        stats: FetchStats,
        params: list[object] | tuple[object, ...],
    ) -> None:
        """Offer a plan just run as its shape's template, or check the one kept against it."""
        plan = kept.plan
        if not plan.pushdown or plan.fallback is not None or plan.peels:
            return
        made = fingerprint(plan, stats.remote_sql, recorder.uses)
        found = self._keeping().peek(key)
        if found is None or found.template is None:
            template = Template(recorder.uses, made, tuple(params))
            self._keep(key, CachedPlan(kept.names, plan, kept.tree, template))
        else:
            found.template.check(made, params)

    def _from_template(
        self,
        key: Key,
        params: list[object] | tuple[object, ...],
        started: float,
        *,
        direct: bool = False,
    ) -> Result | None:
        """The answer of the shape's trusted template with ``params`` (None: plan for them;
        ``direct``: also when the template's answer is not its fetched rows)."""
        found = self._cached(key, count=False)
        if found is None or found.template is None or not found.template.verified:
            return None
        if not found.template.fits(params):
            return None  # the plan may rest on parameters equal as planned (``Template.fits``)
        if direct and projection(found.plan) is None:
            return None
        stats, stamp = FetchStats(), self._design_stamp
        stats.plan_hit = True
        stats.plan_seconds = time.perf_counter() - started
        try:
            ran = self.run_template(found.template, found.plan, params, stats)
        except Exception as exc:
            if isinstance(exc, _NO_FALLBACK):
                raise
            log.info("template of %r failed (%s); planning for these values", key[0], exc)
            return None  # a query changes nothing: the usual path answers it again
        if ran is None or self._layers_moved(stamp):
            return None
        self.plans.hits += 1
        return self._named(found, ran[1], stats, ran[0])

    def run_template(
        self,
        template: Template,
        plan: SplitPlan,
        params: list[object] | tuple[object, ...],
        stats: FetchStats,
    ) -> tuple[SplitPlan, pa.Table] | None:
        """``plan`` (``template``'s) run with ``params`` encrypted into its slots: the plan as
        run and its answer; None if a value's type cannot hold it exactly."""
        encrypting = time.perf_counter()
        values = self._bound(template, params)
        if values is None:
            return None
        stats.encrypt_seconds += time.perf_counter() - encrypting
        self._local_sql(plan)  # once, on the kept plan: every run's copy reads it
        # servers that take parameters run the statements rendered once, filled as sent;
        # Spark's are written with their values, so rendered each run
        pending = self.backend.dialect in _PARAMETERS_SENT
        plan = dataclasses.replace(plan, rendered=template.rendered if pending else {})
        with bound(values, pending=pending):
            return plan, self.execute_plan(plan, stats)

    @contextlib.contextmanager
    def recording(self, recorder: Recorder | None) -> Iterator[None]:
        """Plan under ``recorder``: each ciphertext made from a parameter becomes a slot."""
        self._recorder = recorder
        try:
            yield
        finally:
            self._recorder = None

    def _bound(
        self, template: Template, params: list[object] | tuple[object, ...]
    ) -> list[object] | None:
        """Each slot's ciphertext of ``params``; None if a value's type cannot hold it exactly."""
        values: list[object] = []
        for use in template.uses:
            node = use.node
            value = params[node.meta[PARAM][1]] if PARAM in node.meta else None
            exact = fast_exact(node, value, use.enc.sql_type.name)
            if exact is False:
                return None
            if exact:
                encoded: int | bytes | None = encode_scalar(value, use.enc.sql_type)
            else:
                encoded = self.encoded_constant(substituted(node, params), use.enc)
            if encoded is None:
                return None
            cipher = self.ciphers.get(self._owners[use.enc.name], use.enc)
            if use.enc.scheme == DET:
                values.append(self._slot_ciphertext(cipher, encoded))
            else:
                values.append(cipher.encrypt_one(encoded))
        return values

    def _slot_ciphertext(self, cipher: ColumnCipher, encoded: int | bytes) -> int | bytes:
        """``cipher.encrypt_one(encoded)`` of a DET cipher, kept for the values bound recently.

        DET gives a value one ciphertext under one cipher (made once per key and
        form: ``CipherCache``), so a key bound again (pgbench's UPDATE and SELECT of
        one account, its 10 branches and 100 tellers) is not encrypted again; the
        ciphertexts stay in this process, which holds the key anyway.
        """
        key = (id(cipher), type(encoded), encoded)
        found = self._det_slots.get(key)
        if found is not None and found[0] is cipher:
            return found[1]
        made = cipher.encrypt_one(encoded)
        if len(self._det_slots) >= _DET_SLOTS_KEPT:
            self._det_slots.clear()
        self._det_slots[key] = (cipher, made)
        return made

    def _plan_key(self, sql: str, params: list[object] | tuple[object, ...] | None) -> Key:
        """The plan cache's key: the planner's settings and the design's version too."""
        settings = f"{self.hom_pushdown};join sums {self.join_sums};design {self._design_stamp}"
        return plan_key(sql, params, settings)

    def _cached(self, key: Key, *, count: bool = True) -> CachedPlan | None:
        """The plan of ``key`` this session may run: in a transaction its own, else a shared
        one (rows written meanwhile change no plan's answer: only the design does)."""
        if self.in_transaction:
            found = self._transaction_plans.get(key, count=count)
            if found is not None:
                return found
        return self.plans.get(key, count=count)

    def _cached_answer(self, key: Key, cached: CachedPlan) -> Result:
        """The answer of a cached plan; one that did not run as planned (a fallback, a plan
        made again) is forgotten, as a first run keeps only a plan that ran as planned (a
        plan kept at the load has not run yet: ``veil.session.workload_plans``)."""
        result = self._answer(cached)
        if result.plan is not cached.plan:
            self._forget(key)
        return result

    def _keep(self, key: Key, planned: CachedPlan) -> None:
        self._keeping().put(key, planned)

    def _keeping(self) -> PlanCache:
        """Where the plan just made is kept: shared, unless a transaction made it without
        the peels it wanted (they commit on their own: the plan after them is better).
        Shared, a statement repeated in transactions (pgbench's) is planned once."""
        return self._transaction_plans if self._peels_skipped else self.plans

    def _forget(self, key: Key) -> None:
        self._transaction_plans.discard(key)
        self.plans.discard(key)

    def admitted(self, sql: str, params: list[object] | tuple[object, ...] | None) -> exp.Expr:
        """``sql`` parsed with its parameters bound, if a session may run it (else refused)."""
        check_text(sql, external_access=self.external_access)
        tree = bind_parameters(parse_statement(sql), params)
        self.admit(tree)
        return with_sequence_values(self, tree)

    def admit(self, tree: exp.Expr, *, catalog: bool = False) -> None:
        """Refuse ``tree`` if it reaches for the trusted side (``veil.sql.sandbox``)."""
        catalog = catalog or reads_only_catalog(tree)
        check_tree(tree, catalog=catalog, external_access=self.external_access and not catalog)

    def write(self, tree: exp.Insert | exp.Update | exp.Delete) -> Result:
        """Run an INSERT, UPDATE or DELETE (a foreign key's action runs its own this way)."""
        # rows never invalidate a plan (``plan_cache``): only a design change does
        from veil.session.dml import run_dml  # (imported when first needed)

        return run_dml(self, tree)

    def query(self, tree: exp.Expr) -> Result:
        return self._answer(CachedPlan(self.describe(tree), self.plan(tree), tree))

    def _answer(self, planned: CachedPlan, *, again: bool = True) -> Result:
        plan, stats = planned.plan, FetchStats()
        stamp = self._design_stamp
        try:
            table = self.execute_plan(plan, stats)
        except Exception as exc:
            if again and not self.in_transaction and self.design_file_stamp() != stamp:
                # the design moved under the plan (a rebuild or re-key swapped a table in
                # and dropped the server tables it read): plan and run again on the new one
                self.follow_design()
                replanned = CachedPlan(planned.names, self.plan(planned.tree), planned.tree)
                return self._answer(replanned, again=False)
            if not plan.pushdown or isinstance(exc, _NO_FALLBACK):
                raise  # nothing to fall back from, or no use falling back
            return self._fallback(planned, exc, stats)
        if again and self._layers_moved(stamp):
            # another session peeled a layer this plan fetched through: its rows may have
            # been decrypted under the old layer; plan and run again on the new design
            # (and check again: a peel's mark comes before its commit, its record after,
            # and the run again may fall between another's; peels are finite)
            self.follow_design()
            replanned = CachedPlan(planned.names, self.plan(planned.tree), planned.tree)
            return self._answer(replanned)
        return self._named(planned, table, stats, plan)

    def _layers_moved(self, stamp: int) -> bool:
        """Has the design changed since ``stamp`` while it holds onions (a peel elsewhere)?"""
        # the stamp first: one stat, where has_wrapped walks every encryption (~1-4 ms on
        # TPC-DS's 24 tables, on every run of a cached plan)
        return _stamp(self._design_file) != stamp and has_wrapped(self.design)

    def _fallback(self, planned: CachedPlan, exc: Exception, stats: FetchStats) -> Result:
        """The always-correct fetch-everything plan, after the split plan failed.

        The query passed the binder on the plaintext schema, so the split plan
        misjudged it (e.g. DuckDB's COLUMNS(...) hides which columns it reads)
        or an optimisation failed.
        """
        if isinstance(exc, RepeatedRowsError) and self.join_sums:
            # a key recorded at load repeats since (a write): plan without sums over
            # joins from now on, which still joins and sums on the server where it can
            log.info("%s; planning without sums over server joins", exc)
            self.join_sums = False
            self.plans.clear()
            replanned = CachedPlan(planned.names, self.plan(planned.tree), planned.tree)
            return self._answer(replanned, again=False)
        if isinstance(exc, OverflowedRowsError):
            # rows written since the load whose summed expression the stored sums could
            # not hold: this query sums on the client, from its split plan's fetched rows
            log.info("%s; planning this query without server sums", exc)
            from veil.sql.planner import plan_query

            plan = plan_query(planned.tree, self.design, self, without=_SERVER_SUMS)
            if plan.pushdown:
                return self._named(planned, self.execute_plan(plan, stats), stats, plan)
        from veil.sql.planner import plan_fetch_all

        plan = plan_fetch_all(planned.tree, self.design)
        plan.fallback = fallbacks.failed_run(exc)
        log.info("%s; the client runs the query", plan.fallback)
        return self._named(planned, self.execute_plan(plan, stats), stats, plan)

    @staticmethod
    def _named(planned: CachedPlan, table: pa.Table, stats: FetchStats, plan: SplitPlan) -> Result:
        if len(planned.names) == table.num_columns:  # DESCRIBE of PIVOT lists something else
            table = table.rename_columns(planned.names)
        return Result(table, len(table), stats, plan)

    def plan(
        self, tree: exp.Expr, *, row_ids_of: str | None = None, peel: bool = True
    ) -> SplitPlan:
        """The split plan of ``tree``, after peeling the onion layers it needs.

        ``peel=False`` (``veil explain``) peels nothing: the plan is the one
        the query would get after its peels, which ``SplitPlan.peels`` lists.
        """
        self._encoded.clear()
        self._peels_skipped = False
        design, peels = self.design, []
        if has_wrapped(design):
            peels = wanted_peels(design, self.client.policy(), tree)
            if peels and peel and self.in_transaction:
                peels = []  # a peel commits on its own: inside a transaction the client does it
                self._peels_skipped = True
            elif peels and peel:
                try:
                    peel_layers(self, peels, tree.sql(dialect="duckdb"))
                except VeilError as exc:  # e.g. a server without Veil's layer functions
                    # an optimisation: the query still runs, its part on the client
                    log.warning("could not peel onion layers (%s); the client runs that part", exc)
                    self.reload_design()  # the layers that did come off
                design = self.design
            elif peels:
                design = peeled_view(design, peels)
        # the planner and the cost model (~20 modules) load on a first planning: a
        # process answering from plans kept by earlier ones never needs them (issue 41)
        from veil.cost.choice import choose_plan
        from veil.sql.planner import plan_query

        if row_ids_of is None and isinstance(tree, exp.Query):
            plan = choose_plan(self, tree, design)
        else:
            plan = plan_query(tree, design, self, row_ids_of=row_ids_of)
        plan.peels = [str(p) for p in peels]
        return plan

    def describe(self, tree: exp.Expr) -> list[str]:
        """Output column names; raises QueryError for unknown names or type errors."""
        try:
            rows = self.catalog.execute(f"DESCRIBE {tree.sql(dialect='duckdb')}").fetchall()
        except duckdb.Error as exc:
            raise QueryError(self._in_user_terms(duckdb_message(exc))) from None
        return [str(r[0]) for r in rows]

    def execute_plan(self, plan: SplitPlan, stats: FetchStats) -> pa.Table:
        """Run a plan (never changing it): fetch and decrypt its scans, run its local plan."""
        found = projection(plan)
        if found is not None:  # the answer may be the fetched rows (``veil.exec.direct``)
            scan, pairs = found
            fetched = self._fetch_direct(plan, scan, stats)
            table = projected(fetched, pairs, whole=scan.aggregation is not None)
            if table is not None:
                return self._finished(plan, table, stats, decrypted_early(plan))
        registered = self._fetch_scans(plan, stats)
        try:
            started = time.perf_counter()
            try:
                table = local_arrow(self.local, self._local_sql(plan), plan)
            except duckdb.Error as exc:
                raise local_error(exc, self._in_user_terms(duckdb_message(exc))) from None
            stats.local_seconds += time.perf_counter() - started
            return self._finished(plan, table, stats)
        finally:
            self._unregister(registered)

    def _fetch_direct(self, plan: SplitPlan, scan: Scan, stats: FetchStats) -> pa.Table:
        """The one scan of a plan answered from its fetched rows, decrypted (with the late
        outputs it decrypts itself: ``decrypted_early``)."""
        early = decrypted_early(plan)
        leave = scan.ciphertext - early if early else None
        return run_scan(scan, {}, self.backend, self.ciphers, stats, plan.rendered, leave)

    def _finished(
        self,
        plan: SplitPlan,
        table: pa.Table,
        stats: FetchStats,
        early: frozenset[str] = frozenset(),
    ) -> pa.Table:
        """The local plan's answer with its late outputs decrypted (but those of the columns
        ``early``, decrypted with the one scan's other columns)."""
        late = (
            [o for o in plan.late_outputs if o.column not in early] if early else plan.late_outputs
        )
        if late:
            started, server_before = time.perf_counter(), stats.server_seconds
            table = decrypt_outputs(table, late, self.ciphers)
            stats.decrypted(started, server_before)
        _count_fallback(plan)
        return table

    def _fetch_scans(self, plan: SplitPlan, stats: FetchStats) -> list[str]:
        """Fetch and decrypt the plan's scans into the local DuckDB; their names there."""
        registered: list[str] = []
        self._local_sql(plan)  # which members it reads through their joined table only
        extras: Extras = {}  # this run's bind filters, by scan (the plan stays as it is)
        memo: KeyMemo = {}  # this run's bind filters' key lists
        try:
            with shared_fetches():  # one query's repeated statements sent once
                joined: dict[str, pa.Table] = {}
                tables: dict[str, pa.Table] = {}  # by local name, for the scans sharing them
                for scan in fetch_order(plan.scans):
                    if scan.same_rows is not None:
                        continue  # registered below, once the scan it shares is fetched
                    if scan.joined is not None and scan.local_name not in joined:
                        for member in scan.joined.scans:
                            extras[id(member)] = key_filters(member, self.local, self.ciphers, memo)
                        joined.update(
                            run_joined(
                                scan.joined,
                                extras,
                                self.backend,
                                self.ciphers,
                                stats,
                                plan.rendered,
                            )
                        )
                    if scan.joined is None:
                        extras[id(scan)] = key_filters(scan, self.local, self.ciphers, memo)
                    fetched = (
                        joined.pop(scan.local_name)
                        if scan.joined is not None
                        else run_scan(
                            scan, extras, self.backend, self.ciphers, stats, plan.rendered
                        )
                    )
                    tables[scan.local_name] = fetched
                    if scan.unread or scan.local_name in plan.unregistered:
                        continue  # the local plan does not name it
                    self.local.register(scan.local_name, fetched)
                    registered.append(scan.local_name)
                    for late in scan.late:  # its IN-subqueries' keys, found over ciphertexts
                        registered.append(
                            register_late_keys(late, scan, self.local, self.ciphers, self._views)
                        )
                for scan in plan.scans:
                    if scan.same_rows is not None and not scan.unread:
                        tables[scan.local_name] = tables[scan.same_rows.local_name]
                        if scan.local_name in plan.unregistered:
                            continue
                        self.local.register(scan.local_name, tables[scan.local_name])
                        registered.append(scan.local_name)
                for name, table in joined_tables(plan.scans, tables).items():
                    self.local.register(name, table)  # what the local SQL reads (``_local_sql``)
                    registered.append(name)
        except BaseException:
            self._unregister(registered)
            raise
        return registered

    def _local_sql(self, plan: SplitPlan) -> str:
        """The local plan's SQL, each server join read as the one table it is, not as a
        positional join DuckDB cannot estimate (``veil.exec.one_table``)."""
        if not plan.local_sql:
            local = one_table_per_join(plan.local, plan.scans)
            plan.unregistered = unread_members(local, plan.scans)  # before: a run reads both
            plan.local_sql = local.sql(dialect="duckdb")
        return plan.local_sql

    def _unregister(self, names: list[str]) -> None:
        for name in names:
            if name in self._views:
                self._views.discard(name)
                self.local.execute(f'DROP VIEW IF EXISTS "{name}"')
                name += RAW
            self.local.unregister(name)

    # -- streaming ---------------------------------------------------------------

    def stream(
        self, sql: str, params: list[object] | tuple[object, ...] | None = None
    ) -> Result | Streamed:
        """A query's rows as batches read from the local plan as it runs (``veil serve``).

        Every other statement, and a query whose split plan fails before its
        first row (then the fetch-everything plan answers), gives a ``Result``.
        The session runs nothing else until the stream is read or closed.
        """
        return self.guarded(sql, lambda: self._stream(sql, params))

    def _stream(
        self,
        sql: str,
        params: list[object] | tuple[object, ...] | None,
        *,
        as_written: bool = False,
    ) -> Result | Streamed:
        self.follow_design()
        started = time.perf_counter()
        normal = None if params or as_written else normalized(sql)
        original = sql
        if normal is not None:  # literals as parameters (``veil.sql.literals``)
            sql, params = normal.text, normal.values
        key = self._plan_key(sql, params)
        planned = self._cached(key)
        kinds = shape(params)
        recorder = None
        if planned is None and kinds is not None:
            # a template whose answer is its fetched rows (a point query): whole, as
            # those rows are held whole anyway; others stream from their local plan
            shaped = self._shape_key(sql, kinds)
            answered = self._from_template(shaped, params or (), started, direct=True)
            if answered is not None:
                return answered
        if planned is None:
            if normal is not None and not binds_as_written(original, normal):
                return self._stream(original, None, as_written=True)
            tree = self.admitted(sql, params)
            if not isinstance(tree, exp.Query) or reads_only_catalog(tree):
                return self._run(sql, params)
            recorder = None if kinds is None else Recorder(_markers(tree))
            self._recorder = recorder
            try:
                planned = CachedPlan(self.describe(tree), self.plan(tree), tree)
            finally:
                self._recorder = None
            if is_repeatable(tree):  # under the design it was planned on (after its peels)
                self._keep(self._plan_key(sql, params), planned)
            else:
                recorder = None
        stats, stamp = FetchStats(), self._design_stamp
        try:
            registered = self._fetch_scans(planned.plan, stats)
            if self._layers_moved(stamp):  # a peel elsewhere: answer on the new design
                self._unregister(registered)
                self.plans.clear()
                return self._run(sql, params)
            try:
                reader = exact_reader(self.local, self._local_sql(planned.plan), STREAM_BATCH_ROWS)
            except BaseException:
                self._unregister(registered)
                raise
        except Exception as exc:
            if not self.in_transaction and self.design_file_stamp() != stamp:
                # the design moved under the plan (a rebuild or re-key swapped a table in
                # and dropped the server tables it read): answer on the new one, as _answer
                self._forget(key)
                self.follow_design()
                return self._run(sql, params)
            if not planned.plan.pushdown or isinstance(exc, _NO_FALLBACK):
                raise
            self._forget(key)  # it may have been cached above
            return self._fallback(planned, exc, stats)
        _count_fallback(planned.plan)
        streamed = Streamed(planned.names, reader, lambda: self._unregister(registered), stats)
        if recorder is not None and recorder.complete and kinds is not None:
            self._template(self._shape_key(sql, kinds), planned, recorder, stats, params or ())
        if planned.plan.late_outputs:
            outputs, ciphers = planned.plan.late_outputs, self.ciphers
            streamed.finish(
                decrypted_schema(reader.schema, outputs),
                lambda batch: decrypt_outputs(batch, outputs, ciphers),
            )
        return streamed

    # -- constants --------------------------------------------------------------

    def encrypt_constant(self, node: exp.Expr, enc: Encryption) -> object | None:
        """The ciphertext of a constant under ``enc``, or None if not exactly representable."""
        encoded = self.encoded_constant(node, enc)
        if encoded is None:
            return None
        ciphertext = self.ciphers.get(self._owners[enc.name], enc).encrypt_one(encoded)
        if self._recorder is not None:  # made from a parameter: a slot of the plan
            return self._recorder.record(node, enc, ciphertext)
        return ciphertext

    def encoded_constant(self, node: exp.Expr, enc: Encryption) -> int | bytes | None:
        """The constant's encoding under ``enc``'s type (None: not exactly representable)."""
        key = (text(node), enc.type)
        if key not in self._encoded:
            value = plain_value(node, enc.sql_type)
            if value is NOT_PLAIN:  # DuckDB's casts decide
                value = self._exact_value(key[0], enc.sql_type)
            self._encoded[key] = None if value is None else encode_scalar(value, enc.sql_type)
        return self._encoded[key]

    def expression_type(self, node: exp.Expr, table: str, alias: str) -> str | None:
        sql = f'DESCRIBE SELECT {node.sql(dialect="duckdb")} FROM "{table}" AS "{alias}"'
        try:
            return str(self.catalog.execute(sql).fetchall()[0][1])
        except duckdb.Error:
            return None

    def search_token(self, word: str, enc: Encryption) -> bytes:
        cipher = self.ciphers.get(self._owners[enc.name], enc)
        return cipher.token(word)  # type: ignore[attr-defined]

    def search_match(self, ciphertexts: exp.Expr, token: exp.Expr) -> exp.Expr:
        return self.backend.search_match(ciphertexts, token)  # type: ignore[arg-type]

    def hom_product(self, ciphertexts: exp.Expr, table: TableDesign) -> exp.Expr:
        n_square = param(n_square_bytes(self.ciphers.group(table).n_square))
        return self.backend.hom_sum(ciphertexts, n_square)  # type: ignore[arg-type]

    def id_bit(self, position: exp.Expr) -> exp.Expr:
        return self.backend.id_bit(position)  # type: ignore[arg-type]

    def hashes_not_in(self) -> bool:
        return self.backend.hashes_not_in

    def correlates_deeply(self) -> bool:
        return self.backend.correlates_deeply

    def semi_joins_by_exists(self) -> bool:
        return self.backend.semi_joins_by_exists

    def scanned_rows_per_byte(self) -> float:
        return self.backend.scanned_rows_per_byte

    def wrapping_sum(self, value: exp.Expr) -> exp.Expr:
        return self.backend.wrapping_sum(value)  # type: ignore[arg-type]

    def extreme(self, kind: str, value: exp.Expr, enc: Encryption) -> exp.Expr:
        return self.backend.extreme(kind, value, enc.ope_binary)  # type: ignore[arg-type]

    def _exact_value(self, constant: str, sql_type: SqlType) -> object | None:
        cast = f"TRY_CAST(({constant}) AS {sql_type.name})"
        # Python reads DATE 'infinity' as 9999-12-31: such constants stay on the client
        finite = (
            f"NOT isinf({cast})"
            if sql_type.kind in ("date", "timestamp", "timestamptz")
            else "true"
        )
        try:
            row = self.catalog.execute(
                f"SELECT {cast}, {cast} = ({constant}), typeof(({constant})), {finite}"
            ).fetchall()[0]
        except duckdb.Error:
            return None
        if row[0] is None or row[1] is not True or row[3] is not True:
            return None
        if not any(f in str(row[2]) for f in CONSTANT_FAMILIES[sql_type.kind]):
            return None
        return row[0]


def _timed(
    result: Result, *, parse: float = 0.0, plan: float = 0.0, hit: bool | None = None
) -> Result:
    """``result`` with the client's time before the server's (its parse, its plan) recorded."""
    result.stats.parse_seconds += parse
    result.stats.plan_seconds += plan
    if hit is not None:
        result.stats.plan_hit = hit
    return result


def _markers(tree: exp.Expr) -> int:
    """How many parameter markers the statement had."""
    return len({n.meta[PARAM][0] for n in tree.walk() if PARAM in n.meta})


def _count_fallback(plan: SplitPlan) -> None:
    """Count a plan that fetched whole tables in place of a failed split, once it answers.

    Not before: a query whose fetch-everything plan raises too (``error('boom')``,
    a cast of a bad value) failed on its own terms, not the split planner's."""
    if plan.fallback is not None:
        fallbacks.record(plan.fallback)


def _stamp(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return 0


HOM_PUSHDOWN_CHOICES = ("auto", "always", "never")


def _hom_pushdown() -> str:
    """``VEIL_HOM_PUSHDOWN``: when packed HOM sums run on the server (default ``auto``)."""
    policy = os.environ.get("VEIL_HOM_PUSHDOWN", "auto").lower()
    if policy not in HOM_PUSHDOWN_CHOICES:
        raise ParameterError(
            f"VEIL_HOM_PUSHDOWN={policy!r} is not one of {', '.join(HOM_PUSHDOWN_CHOICES)}"
        )
    return policy
