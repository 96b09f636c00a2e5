"""The workload's queries planned once at the load, their plans kept for the first process.

A load given its workload (``veil load --workload``, ``veil demo``) designs the
server's columns for those queries, and an application then sends exactly those
texts. Yet each one's first run planned it from nothing: parse, qualify,
DESCRIBE, the planner's passes, its constants' encodings, 10-60 ms a TPC-H
query at SF 0.1 where plaintext DuckDB answers in 5-30 ms (issue 41: ``make
demo``'s first runs 3.8-4.5x plaintext, the runs again 1.7x). ``plan_workload``
plans each query of the workload once, right after the load, under the design
just saved, and keeps the plan where a first run looks: the process's plan
cache and the client directory's ``plans.sealed`` (``veil.session.sealed_plans``:
sealed under the master key, mode 0600, ignored under any other design, server,
key or code). The plan is the very one the first run would have made: the same
session code keys it (its literals as parameters when they bind as written),
plans it and renders its local SQL and, where no bind filter can change them, its
server statements; nothing runs on the server.

What it does not plan: statements that are not queries (DML, DDL), those with
markers of their own (``?``: their values come at run time), ``now()``/
``random()`` (planned every run), locking reads and PIVOTs, and nothing at all
under a design with onion layers to peel (a query that needs a peel would reveal
it at the load, before anyone runs it: it peels at its first run, as before).
A query that fails to plan is left to its first run, which reports the error.

A plan kept this way has not run yet, where a plan a run made is kept only if it
ran as planned: if its first run falls back, the session forgets it
(``Session._run``) and plans again next time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path

from sqlglot import exp

from veil.backends import Backend
from veil.errors import VeilError
from veil.session.onions import has_wrapped
from veil.session.plan_cache import CachedPlan
from veil.session.session import Session
from veil.session.templates import binds_as_written
from veil.sql.catalog_queries import reads_only_catalog
from veil.sql.functions import is_repeatable
from veil.sql.literals import normalized
from veil.sql.plan import SplitPlan
from veil.sql.remote import joined_statement, render, scan_statement

log = logging.getLogger(__name__)


def plan_workload(client_dir: str | Path, statements: Iterable[str]) -> dict[str, float]:
    """Plan each query of ``statements`` under ``client_dir``'s design and keep its plan;
    returns the seconds each planned one took, by its text. Never fails its caller (a
    load that is done): a query not planned here is planned by its first run, as before."""
    planned: dict[str, float] = {}
    try:
        session = Session(client_dir)
    except Exception as exc:
        log.warning("the workload's queries are not planned ahead (%s)", exc)
        return planned
    try:
        if has_wrapped(session.design):
            return planned  # peels wait for the queries that need them
        for sql in statements:
            started = time.perf_counter()
            try:
                kept = plan_ahead(session, sql)
            except VeilError as exc:  # its first run plans it and says what is wrong
                log.info("not planned at the load (%s): %.60s", exc, sql)
                continue
            except Exception as exc:  # (a planner's defect: its first run meets it too)
                log.warning("not planned at the load (%r): %.60s", exc, sql)
                continue
            if kept:
                planned[sql] = time.perf_counter() - started
    finally:
        session.close()  # saves plans.sealed
    return planned


def plan_ahead(session: Session, sql: str) -> bool:
    """Plan ``sql`` as its first ``session.run`` would and keep the plan under the key that
    run looks up; False where that run would not keep one (see the module's notes)."""
    text, params = sql, None
    normal = normalized(sql)
    if normal is not None and binds_as_written(sql, normal):
        text, params = normal.text, normal.values
    key = session._plan_key(text, params)
    if session.plans.get(key, count=False) is not None:
        return False
    tree = session.admitted(text, params)
    if not _plannable(tree):
        return False
    plan = session.plan(tree, peel=False)
    if plan.peels:  # (no onions here: checked before) a plan after peels not made
        return False
    session._local_sql(plan)  # (kept on the plan: its first run renders it otherwise)
    if not any(scan.binds for scan in plan.scans):
        render_statements(plan, session.backend)
    session._keep(session._plan_key(text, params), CachedPlan(session.describe(tree), plan, tree))
    return True


def render_statements(plan: SplitPlan, backend: Backend) -> None:
    """Each fetch's statement rendered as its first run renders and keeps it
    (``veil.exec.server.run_kept``, by id of the scan or of its server join).

    Only for a plan without bind filters: a statement's run-time filters (``extras``)
    come only from its scans' and its reduction's bind filters, so there every run
    sends the statement built with none, and this is that statement."""
    for scan in plan.scans:
        if scan.same_rows is not None:
            continue  # never fetched: it reads the rows of the scan it names
        if scan.joined is not None and id(scan.joined) not in plan.rendered:
            plan.rendered[id(scan.joined)] = render(joined_statement(scan.joined, {}), backend)
        elif scan.joined is None and id(scan) not in plan.rendered:
            plan.rendered[id(scan)] = render(scan_statement(scan, {}), backend)


def _plannable(tree: exp.Expr) -> bool:
    """A query whose plan a first run would keep (``Session._run``), with its names as
    DESCRIBE gives them (no PIVOT), and no markers left to bind."""
    if not isinstance(tree, exp.Query) or tree.find(exp.Pivot, exp.Placeholder) is not None:
        return False
    if isinstance(tree, exp.Select) and tree.args.get("locks"):
        return False
    return not reads_only_catalog(tree) and is_repeatable(tree)
