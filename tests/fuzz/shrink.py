"""Shrinking a failing query by delta debugging its sqlglot tree.

Candidates remove a subtree (a list element: a SELECT item, a join, an ORDER
BY key, a CTE; an optional clause: WHERE, HAVING, GROUP BY, ORDER BY, LIMIT,
DISTINCT, QUALIFY; an ORDER BY and its keys only once no LIMIT or OFFSET
windows it) or replace one with a part of it (AND/OR by a side, a set
operation by a side, a function or CASE by an argument, a predicate by TRUE).
A candidate is kept when it still fails the same way (``still_fails``); the
search restarts from it until no candidate is kept or the budget runs out.

Parameters survive shrinking: each ``?`` becomes a call ``__fzp(n)`` while the
tree is edited, and every candidate turns the calls left back into ``?``
markers with their values, in text order.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import sqlglot
from sqlglot import exp

from tests.fuzz.generator import Query, sql_literal
from tests.fuzz.params import decode_params, encode_params

_SENTINEL = re.compile(r"__FZP\((\d+)\)", re.I)
_OPTIONAL = ("where", "having", "group", "order", "limit", "offset", "distinct", "qualify", "with")


def _mark(sql: str) -> str:
    """``?`` markers (outside string literals) as ``__fzp(n)`` calls."""
    out, n, i = [], 0, 0
    while i < len(sql):
        ch = sql[i]
        if ch == "'":
            j = i + 1
            while j < len(sql):
                if sql[j] == "'" and (j + 1 >= len(sql) or sql[j + 1] != "'"):
                    break
                j += 2 if sql[j] == "'" else 1
            out.append(sql[i : j + 1])
            i = j + 1
            continue
        if ch == "?":
            out.append(f"__fzp({n})")
            n += 1
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def render(tree: exp.Expr, params: list[object]) -> tuple[str, list[object]]:
    """The tree's SQL with ``__fzp(n)`` calls back as ``?`` and their values in order."""
    text = tree.sql(dialect="duckdb")
    ordered: list[object] = []

    def take(match: re.Match[str]) -> str:
        ordered.append(params[int(match.group(1))])
        return "?"

    return _SENTINEL.sub(take, text), ordered


def _candidates(tree: exp.Expr) -> Iterator[Callable[[exp.Expr], exp.Expr | None]]:
    """Edits, each applied to a fresh copy: it returns the new root (or None)."""
    nodes = list(tree.walk())
    for index, node in enumerate(nodes):
        yield from _edits(index, node)


def _at(index: int) -> Callable[[exp.Expr], exp.Expr]:
    return lambda root: list(root.walk())[index]


def _edits(index: int, node: exp.Expr) -> Iterator[Callable[[exp.Expr], exp.Expr | None]]:
    find = _at(index)
    parent = node.parent
    if isinstance(node, exp.Query | exp.Select):
        windowed = bool(node.args.get("limit") or node.args.get("offset"))
        for arg in _OPTIONAL:
            if node.args.get(arg) and not (arg == "order" and windowed):
                yield _drop_arg(find, arg)  # a LIMIT without its ORDER BY picks any rows
        for position in range(len(node.args.get("joins") or [])):
            yield _drop_list_item(find, "joins", position)
        if len(node.expressions) > 1:
            for position in range(len(node.expressions)):
                yield _drop_list_item(find, "expressions", position)
    if isinstance(node, exp.With):
        for position in range(len(node.expressions)):
            yield _drop_list_item(find, "expressions", position)
    windowed = isinstance(node, exp.Order) and _limits(node.parent)
    if isinstance(node, exp.Order | exp.Group) and len(node.expressions) > 1 and not windowed:
        for position in range(len(node.expressions)):
            yield _drop_list_item(find, "expressions", position)
    if isinstance(node, exp.SetOperation):
        yield _replace_with_arg(find, "this")
        yield _replace_with_arg(find, "expression")
    if isinstance(node, exp.Connector):
        yield _replace_with_arg(find, "this")
        yield _replace_with_arg(find, "expression")
    if isinstance(node, exp.Not | exp.Paren):
        yield _replace_with_arg(find, "this")
    if parent is not None and _is_predicate(node) and node.arg_key != "on":
        yield _replace_with(find, lambda: exp.true())
    if isinstance(node, exp.Subquery) and not isinstance(parent, exp.From | exp.Join):
        yield _replace_with(find, lambda: exp.null())
    if isinstance(node, exp.Func | exp.Case | exp.Cast | exp.Binary) and not isinstance(
        node, exp.Connector
    ):
        for key, value in node.args.items():
            if isinstance(value, exp.Expr) and not isinstance(value, exp.DataType):
                yield _replace_with_arg(find, key)
    if isinstance(node, exp.In):
        for position in range(len(node.expressions)):
            if len(node.expressions) > 1:
                yield _drop_list_item(find, "expressions", position)


def _is_predicate(node: exp.Expr) -> bool:
    return isinstance(
        node, exp.Predicate | exp.Exists | exp.In | exp.Between | exp.Like | exp.ILike | exp.Is
    ) and not isinstance(node, exp.Connector)


def _drop_arg(find: Callable[[exp.Expr], exp.Expr], arg: str) -> Callable[[exp.Expr], exp.Expr]:
    def edit(root: exp.Expr) -> exp.Expr:
        find(root).set(arg, None)
        return root

    return edit


def _drop_list_item(
    find: Callable[[exp.Expr], exp.Expr], arg: str, position: int
) -> Callable[[exp.Expr], exp.Expr | None]:
    def edit(root: exp.Expr) -> exp.Expr | None:
        items = list(find(root).args.get(arg) or [])
        if position >= len(items):
            return None
        del items[position]
        find(root).set(arg, items or None)
        return root

    return edit


def _replace_with_arg(
    find: Callable[[exp.Expr], exp.Expr], key: str
) -> Callable[[exp.Expr], exp.Expr | None]:
    def edit(root: exp.Expr) -> exp.Expr | None:
        node = find(root)
        part = node.args.get(key)
        if not isinstance(part, exp.Expr):
            return None
        if node is root:
            return part.copy()
        node.replace(part.copy())
        return root

    return edit


def _replace_with(
    find: Callable[[exp.Expr], exp.Expr], make: Callable[[], exp.Expr]
) -> Callable[[exp.Expr], exp.Expr | None]:
    def edit(root: exp.Expr) -> exp.Expr | None:
        node = find(root)
        if node is root:
            return None
        node.replace(make())
        return root

    return edit


def shrink(
    query: Query,
    still_fails: Callable[[str, list[object]], bool],
    budget_seconds: float = 120.0,
    max_checks: int = 600,
) -> Query:
    """The smallest query found that still fails the same way as ``query``."""
    params = list(query.params)
    try:
        tree = sqlglot.parse_one(_mark(query.sql), read="duckdb")
    except sqlglot.errors.ParseError:
        return query
    deadline = time.monotonic() + budget_seconds
    checks = 0
    best_sql, best_params = query.sql, list(params)
    improved = True
    while improved and checks < max_checks and time.monotonic() < deadline:
        improved = False
        for edit in _candidates(tree):
            if checks >= max_checks or time.monotonic() >= deadline:
                break
            try:
                candidate = edit(tree.copy())
                if candidate is None:
                    continue
                sql, values = render(candidate, params)
            except Exception:  # an edit sqlglot cannot render is just not a candidate
                continue
            if len(sql) >= len(best_sql):
                continue
            checks += 1
            if still_fails(sql, values):
                tree, best_sql, best_params = candidate, sql, values
                improved = True
                break
    inlined = _inline(best_sql, best_params)
    if best_params and still_fails(inlined, []):
        best_sql, best_params = inlined, []
    return Query(query.seed, best_sql, best_params, query.shape)


def _inline(sql: str, params: list[object]) -> str:
    """The SQL with each ``?`` replaced by its parameter's literal."""
    return _SENTINEL.sub(lambda m: sql_literal(params[int(m.group(1))]), _mark(sql))


# -- regression files -------------------------------------------------------------


def regression_text(
    query: Query, backend: str, hom: str, mode: str, failure: str, detail: str
) -> str:
    header = [
        f"-- seed: {query.seed}",
        f"-- backend: {backend}",
        f"-- hom: {hom}",
        f"-- mode: {mode}",
        f"-- params: {json.dumps(encode_params(query.params), ensure_ascii=False)}",
        f"-- failure: {failure}",
        f"-- detail: {' '.join(detail.split())[:500]}",
    ]
    return "\n".join(header) + "\n" + query.sql.strip() + ";\n"


def write_regression(folder: Path, text: str, sql: str, params: list[object]) -> Path:
    digest = hashlib.sha1((sql + json.dumps(encode_params(params))).encode()).hexdigest()[:10]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{digest}.sql"
    path.write_text(text)
    return path


def read_regression(path: Path) -> tuple[dict[str, str], Query]:
    """A regression file's header fields and its query."""
    fields: dict[str, str] = {}
    body: list[str] = []
    for line in path.read_text().splitlines():
        match = re.match(r"-- (\w+): (.*)", line)
        if match and not body:
            fields[match.group(1)] = match.group(2)
        else:
            body.append(line)
    sql = "\n".join(body).strip().rstrip(";")
    params = decode_params(json.loads(fields.get("params", "[]")))
    return fields, Query(int(fields.get("seed", "0")), sql, params, "regression")


def _limits(query: exp.Expr | None) -> bool:
    """Whether ``query`` keeps a window of its ordered rows (LIMIT or OFFSET): its ORDER
    BY keys all stay, or the window is any rows."""
    return query is not None and bool(query.args.get("limit") or query.args.get("offset"))
