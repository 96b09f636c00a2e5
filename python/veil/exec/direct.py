"""Plans whose answer is the fetched rows themselves, with no local DuckDB (issue 41).

A point query by key (``SELECT a, b FROM t WHERE k = ?`` with ``k`` DET on the
server) leaves the client a local plan that only names the scan's columns:
``SELECT t.a AS a, t.b AS b FROM __veil_scan_0 AS t``. Registering the
decrypted rows in the local DuckDB, running that and reading its Arrow back
cost more than the server's own work (~3 ms of a 9 ms statement); the answer
is the fetched table's columns, renamed. Only types DuckDB gives back as it
takes them qualify (its output of a DECIMAL or a list may differ in kind:
``veil.encoding.exact_arrow``); anything else runs the local plan as before.
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from veil.encoding import DATE_KIND, DECIMAL_KIND, INT_KIND, STRING_KIND
from veil.sql.plan import Scan, SplitPlan

_CLAUSES = {"expressions", "from_"}  # a SELECT with nothing but these only projects


def projection(plan: SplitPlan) -> tuple[Scan, list[tuple[str, str]]] | None:
    """The plan's one scan and its (column, output name) pairs if the local plan only
    projects that scan's columns; None otherwise.

    Asked on every run of a kept plan (each run's copy shares its local plan and
    scans), so the answer is kept with them: the walk costs ~20-40 us.
    """
    return _seen(plan)[0]


def decrypted_early(plan: SplitPlan) -> frozenset[str]:
    """The columns of the plan's late outputs (``veil.exec.late.decrypt_outputs``) that
    its one scan decrypts with its other columns where its answer is the fetched rows
    (``projection``): each output only passes its column through, so decrypting it
    later decrypts the same values, in a step of its own (~0.1 ms of a point
    ``SELECT *`` with two DET keys, issue 41). A column is left late unless every one of
    its late outputs is such, and of a type whose decrypted values are its result's.
    """
    return _seen(plan)[1]


def _seen(plan: SplitPlan) -> tuple[_Projection, frozenset[str]]:
    key = (id(plan.local), id(plan.scans), id(plan.late_outputs))
    found = _SEEN.get(key)
    if found is not None and all(
        a is b for a, b in zip(found[0], (plan.local, plan.scans, plan.late_outputs), strict=True)
    ):
        return found[1]
    answer = _projection(plan)
    early = _early(plan, answer)
    if len(_SEEN) >= _SEEN_SIZE:
        _SEEN.clear()
    # held: their ids stay theirs
    _SEEN[key] = ((plan.local, plan.scans, plan.late_outputs), (answer, early))
    return answer, early


_Projection = tuple[Scan, list[tuple[str, str]]] | None
_SEEN: dict[tuple[int, int, int], tuple[tuple[object, ...], tuple[_Projection, frozenset[str]]]]
_SEEN = {}
_SEEN_SIZE = 512


# kinds whose decoded values are of the type a result holds them in (``result_array``)
_AS_RESULT = frozenset({INT_KIND, STRING_KIND, DATE_KIND, DECIMAL_KIND})


def _early(plan: SplitPlan, answer: _Projection) -> frozenset[str]:
    if answer is None or not plan.late_outputs:
        return frozenset()
    scan, pairs = answer
    if scan.aggregation is not None:
        return frozenset()
    fetched = {column: enc for column, enc in scan.fetched() if enc is not None}
    able: dict[str, bool] = {}
    for out in plan.late_outputs:
        fits = (
            out.scan is scan
            and out.column in scan.ciphertext
            and out.position < len(pairs)
            and pairs[out.position][0] == out.column
            and fetched.get(out.column) == out.enc
            and out.enc.sql_type.kind in _AS_RESULT
        )
        able[out.column] = able.get(out.column, True) and fits
    return frozenset(column for column, fits in able.items() if fits)


def _projection(plan: SplitPlan) -> _Projection:
    local = plan.local
    if len(plan.scans) != 1 or not isinstance(local, exp.Select):
        return None
    scan = plan.scans[0]
    if scan.joined is not None or scan.same_rows is not None or scan.late or scan.binds:
        return None
    if scan.counted or scan.unread:
        return None  # rows to repeat, or none to read: the local plan knows
    whole = scan.aggregation  # COUNT(*) ... WHERE k = ?: the server's one row
    if whole is not None and (whole.keys or whole.hom_product is not None or whole.id_bit):
        return None
    if any(value for key, value in local.args.items() if key not in _CLAUSES):
        return None
    source = local.args.get("from_")
    table = source.this if isinstance(source, exp.From) else None
    if not isinstance(table, exp.Table) or table.name != scan.local_name or table.args.get("db"):
        return None
    alias = table.alias_or_name
    pairs = []
    for item in local.expressions:
        column = item.this if isinstance(item, exp.Alias) else item
        if whole is not None:
            column = _one_value(column)
        if not isinstance(column, exp.Column) or column.table not in ("", alias):
            return None
        pairs.append((column.name, item.alias_or_name))
    return scan, pairs


def _one_value(node: exp.Expr) -> exp.Expr | None:
    """The column of ``CAST(ANY_VALUE(c) AS BIGINT)`` over a whole-table aggregate's one
    row (a COUNT is BIGINT already: ``projected`` checks the type)."""
    if isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.BIGINT):
        node = node.this
    if isinstance(node, exp.AnyValue):
        return node.this
    if isinstance(node, exp.Anonymous) and node.name.upper() == "ANY_VALUE":
        return node.expressions[0] if len(node.expressions) == 1 else None
    return None


def projected(
    fetched: pa.Table, pairs: list[tuple[str, str]], whole: bool = False
) -> pa.Table | None:
    """The answer from the scan's fetched rows; None if a column's type may not come out
    of DuckDB as it went in (then the local plan runs). ``whole``: a whole-table
    aggregate's row, whose counts are answered as they are."""
    names = set(fetched.column_names)
    if any(column not in names for column, _ in pairs):
        return None
    table = fetched.select([column for column, _ in pairs])
    if not all(_kept(field.type) for field in table.schema):
        return None
    if whole and (table.num_rows != 1 or any(f.type != pa.int64() for f in table.schema)):
        return None
    return table.rename_columns([name for _, name in pairs])


def _kept(kind: pa.DataType) -> bool:
    return (
        pa.types.is_signed_integer(kind)
        or pa.types.is_string(kind)
        or pa.types.is_binary(kind)  # a ciphertext decrypted late
        or kind in (pa.float64(), pa.float32(), pa.bool_(), pa.date32())
        or (pa.types.is_decimal128(kind) and kind.precision <= 18)
    )
