"""REWRITESERVER for predicates (MONOMI Algorithm 1): plaintext predicate -> server predicate.

Only *exact* rewrites are produced, so a rewritten predicate is true on the
server for exactly the rows where the original is true (NULL where NULL), and
NOT/AND/OR of rewritten predicates stay exact::

    o_orderdate < DATE '1995-03-15'   ->  c_5f3a... < $1      (OPE; $1 = OPE(9204))
    c_mktsegment = 'BUILDING'         ->  c_9e01... = $2      (DET; $2 = DET('BUILDING'))
    l_shipmode IN ('MAIL', 'SHIP')    ->  c_77aa... IN ($3, $4)
    SUBSTRING(c_phone, 1, 2) = '13'   ->  c_31c0... = $5      (DET of a per-row expression)
    o_comment IS NULL                 ->  c_0b12... IS NULL   (any encryption)

Constants are evaluated on the client, converted to the column's SQL type and
encrypted; a constant that does not convert exactly (``int_col < 2.5``) or
whose type family differs from the column's leaves the predicate on the client.
Nothing here ever writes a plaintext constant into server SQL (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sqlglot import exp

from veil.design.model import BLOCKS, DET, OPE, Encryption, TableDesign
from veil.sql.columns import BaseColumn, is_constant, like_source, order_source, row_expression
from veil.sql.plan import Scan
from veil.sql.remote import param


class ServerContext(Protocol):
    """What rewriting needs from the session: keys (via ciphers) and server functions."""

    # when HOM sums go to the server: "auto" (cost rule), "always" or "never"
    hom_pushdown: str
    # False once a server join repeated a summed row (``RepeatedRowsError``): the load's
    # key statistics no longer hold, so no ASHE sums over joins (``veil.sql.join_sums``)
    join_sums: bool

    def hashes_not_in(self) -> bool:
        """Whether the server runs ``NOT IN (subquery)`` as a hash anti-join."""
        ...

    def correlates_deeply(self) -> bool:
        """Whether the server resolves a reference more than one subquery out."""
        ...

    def semi_joins_by_exists(self) -> bool:
        """Whether a reduction on several keys goes as a correlated EXISTS (``Backend``'s)."""
        ...

    def scanned_rows_per_byte(self) -> float:
        """The partner rows a reduction may read for each byte it saves (``Backend``'s)."""
        ...

    def encrypt_constant(self, node: exp.Expr, enc: Encryption) -> object | None:
        """The constant's ciphertext under ``enc``, or None if it cannot be exact."""
        ...

    def encoded_constant(self, node: exp.Expr, enc: Encryption) -> int | bytes | None:
        """The constant's plaintext encoding under ``enc``'s type (None: not exact)."""
        ...

    def search_token(self, word: str, enc: Encryption) -> bytes: ...

    def expression_type(self, node: exp.Expr, table: str, alias: str) -> str | None:
        """The SQL type plaintext DuckDB gives ``node`` over ``table AS alias`` (None: unknown)."""
        ...

    def search_match(self, ciphertexts: exp.Expr, token: exp.Expr) -> exp.Expr: ...

    def hom_product(self, ciphertexts: exp.Expr, table: TableDesign) -> exp.Expr:
        """The server's Paillier product of ``table``'s HOM packs (n^2 a parameter)."""
        ...

    def id_bit(self, position: exp.Expr) -> exp.Expr:
        """The server's 64-bit ``1 << position`` (a row's bit in an ASHE block mask)."""
        ...

    def wrapping_sum(self, value: exp.Expr) -> exp.Expr:
        """The server's sum of a BIGINT column, right modulo 2**64 (ASHE words)."""
        ...

    def extreme(self, kind: str, value: exp.Expr, enc: Encryption) -> exp.Expr:
        """The server's MIN or MAX (``kind``) of ``enc``'s OPE ciphertexts ``value``."""
        ...


_RANGE_FLIP: dict[type[exp.Expr], type[exp.Expr]] = {
    exp.GT: exp.LT,
    exp.GTE: exp.LTE,
    exp.LT: exp.GT,
    exp.LTE: exp.GTE,
}


class _Rewriter:
    def __init__(self, scan: Scan, resolved: dict[int, BaseColumn], ctx: ServerContext):
        self.scan, self.resolved, self.ctx = scan, resolved, ctx
        self.schemes: list[str] = []

    def column(self, node: exp.Expr) -> str | None:
        """The plaintext column of this scan that ``node`` reads, if it is one."""
        found = self.resolved.get(id(node)) if isinstance(node, exp.Column) else None
        return found.column if found else None

    def source(self, node: exp.Expr) -> str | None:
        """The design source ``node`` computes: this scan's column or per-row expression."""
        column = self.column(node)
        if column is not None or isinstance(node, exp.Column) or is_constant(node):
            return column
        found = row_expression(node, self.resolved)
        return found[1] if found is not None and found[0] == self.scan.table.name else None

    def server_column(self, column: str, scheme: str) -> Encryption | None:
        enc = self.scan.table.find(column, scheme)
        if enc is not None:
            self.schemes.append(scheme)
        return enc

    def constant(self, node: exp.Expr, enc: Encryption) -> exp.Expr | None:
        if not is_constant(node):
            return None
        value = self.ctx.encrypt_constant(node, enc)
        return None if value is None else param(value)

    def rewrite(self, node: exp.Expr) -> exp.Expr | None:
        if isinstance(node, exp.Paren):
            inner = self.rewrite(node.this)
            return exp.paren(inner) if inner is not None else None
        if isinstance(node, exp.And | exp.Or):
            left, right = self.rewrite(node.this), self.rewrite(node.expression)
            if left is None or right is None:
                return None
            return type(node)(this=left, expression=right)
        if isinstance(node, exp.Not):
            inner = self.rewrite(node.this)
            return exp.Not(this=inner) if inner is not None else None
        if isinstance(node, exp.Like | exp.ILike):
            return _like(self, node)
        if node.args.get("negate"):  # sqlglot's form of `x NOT LIKE y` and the like
            positive = node.copy()
            positive.set("negate", None)
            inner = self.rewrite(positive)
            return exp.Not(this=inner) if inner is not None else None
        handler = _HANDLERS.get(type(node))
        return handler(self, node) if handler else None


def _equality(rw: _Rewriter, node: exp.Expr) -> exp.Expr | None:
    column, other = rw.source(node.this), node.expression
    if column is None:
        column, other = rw.source(node.expression), node.this
    if column is None:
        return None
    enc = rw.server_column(column, DET)
    if enc is None:
        return None
    other_column = rw.column(other)
    if other_column is not None:
        other_enc = rw.server_column(other_column, DET)
        if other_enc is None or other_enc.key_scope != enc.key_scope:
            return None
        return type(node)(this=exp.column(enc.name), expression=exp.column(other_enc.name))
    value = rw.constant(other, enc)
    return type(node)(this=exp.column(enc.name), expression=value) if value is not None else None


def _like(rw: _Rewriter, node: exp.Like | exp.ILike) -> exp.Expr | None:
    """A LIKE whose boolean the design precomputed: ``c = DET(true)`` (NOT LIKE: NOT of it).

    A NULL value gives a NULL boolean, so ``=`` and ``NOT`` give NULL as LIKE does.
    """
    test = _is_true(rw, like_source(node, rw.resolved))
    if test is None:
        return None
    return exp.Not(this=test) if node.args.get("negate") else test


def _is_true(rw: _Rewriter, found: tuple[str, str] | None) -> exp.Expr | None:
    """``c = DET(true)`` for a precomputed boolean ``(table, source)`` of this scan's table."""
    if found is None or found[0] != rw.scan.table.name:
        return None
    enc = rw.server_column(found[1], DET)
    value = rw.constant(exp.true(), enc) if enc is not None else None
    if enc is None or value is None:
        return None
    return exp.EQ(this=exp.column(enc.name), expression=value)


def _in_list(rw: _Rewriter, node: exp.In) -> exp.Expr | None:
    column = rw.source(node.this)
    if column is None or node.args.get("query") or node.args.get("unnest") or not node.expressions:
        return None
    enc = rw.server_column(column, DET)
    if enc is None:
        return None
    values = [rw.constant(v, enc) for v in node.expressions]
    if any(v is None for v in values):
        return None
    return exp.In(this=exp.column(enc.name), expressions=values)


def _range(rw: _Rewriter, node: exp.Expr) -> exp.Expr | None:
    precomputed = _precomputed_order(rw, node)
    if precomputed is not None:
        return precomputed
    kind = type(node)
    column, other = rw.source(node.this), node.expression
    if column is None:
        column, other, kind = rw.source(node.expression), node.this, _RANGE_FLIP[kind]
    enc = rw.server_column(column, OPE) if column else None
    if enc is None:
        return None
    other_column = rw.column(other)
    if other_column is not None:
        other_enc = rw.server_column(other_column, OPE)
        if other_enc is None or other_enc.key_scope != enc.key_scope:
            return None
        return kind(this=exp.column(enc.name), expression=exp.column(other_enc.name))
    value = rw.constant(other, enc)
    return kind(this=exp.column(enc.name), expression=value) if value is not None else None


def _precomputed_order(rw: _Rewriter, node: exp.Expr) -> exp.Expr | None:
    """Two columns of a row compared, as the boolean the design precomputed: ``c = DET(true)``.

    A NULL column gives a NULL boolean, so ``=`` gives NULL as the comparison
    does. Comparing two OPE columns of 6M BLOB ciphertexts cost DuckDB 35 ms;
    testing a narrow DET boolean, ~5.
    """
    return _is_true(rw, order_source(node, rw.resolved))


def _between(rw: _Rewriter, node: exp.Between) -> exp.Expr | None:
    column = rw.source(node.this)
    enc = rw.server_column(column, OPE) if column else None
    if enc is None or node.args.get("symmetric"):
        return None
    low, high = rw.constant(node.args["low"], enc), rw.constant(node.args["high"], enc)
    if low is None or high is None:
        return None
    return exp.Between(this=exp.column(enc.name), low=low, high=high)


def _is_null(rw: _Rewriter, node: exp.Is) -> exp.Expr | None:
    column = rw.column(node.this)
    if column is None or not isinstance(node.expression, exp.Null):
        return None
    enc = rw.scan.table.fetchable(column)  # NULL stays NULL under every scheme
    if enc.scheme == BLOCKS:
        return None  # inside sealed blocks: the client tests it
    rw.schemes.append("NULL")
    return exp.Is(this=exp.column(enc.name), expression=exp.Null())


_HANDLERS: dict[type, Callable[[_Rewriter, exp.Expr], exp.Expr | None]] = {
    exp.EQ: _equality,
    exp.NEQ: _equality,
    exp.In: _in_list,  # type: ignore[dict-item]
    exp.GT: _range,
    exp.GTE: _range,
    exp.LT: _range,
    exp.LTE: _range,
    exp.Between: _between,  # type: ignore[dict-item]
    exp.Is: _is_null,  # type: ignore[dict-item]
}


def rewrite_server(
    predicate: exp.Expr,
    scan: Scan,
    resolved: dict[int, BaseColumn],
    ctx: ServerContext,
) -> tuple[exp.Expr, list[str]] | None:
    """The server form of ``predicate`` over ``scan``'s table and the schemes it uses."""
    rewriter = _Rewriter(scan, resolved, ctx)
    server = rewriter.rewrite(predicate)
    if server is None:
        return None
    return server, sorted(set(rewriter.schemes))
