"""Plans that answer any value of a statement's parameters (issue 41).

The planner encrypts constants into the plan, parameters included, so a plan
cached under ``WHERE o_orderkey = ?`` with one key used to answer only that
key: every new key planned again (~5-25 ms). Here a plan becomes a template
of the statement's *shape* (its text and its parameters' types):

- while a statement with parameters is planned, each ciphertext the planner
  asks for of a constant made from a parameter is handed back as a slot
  (``veil.sql.slots``), and the constant and its encryption are recorded
  (``Recorder``): that is where the value goes and under which encryption;
- a run with other values encrypts each slot's constant anew (``bind``) and
  renders the plan's statements with those ciphertexts;
- a plan is trusted as a template only once a second planning, with values
  that differ in every parameter, made the same plan but for the slots
  (``fingerprint``): same server statements, same local SQL. Everything a
  value may decide (a constant folded away, a filter left to the client, a
  search token, a choice steered by the value) shows as a difference and the
  shape keeps planning per value, as before. So does a shape whose every
  parameter did not reach the server as a slot, a NULL parameter, and a value
  that its slot's type cannot hold exactly (``bind`` returns None).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from veil.design.model import Encryption
from veil.errors import VeilError
from veil.sql.errors import QueryError
from veil.sql.literals import Normalized
from veil.sql.parse import bind_parameters, literal, parse_statement
from veil.sql.plan import SplitPlan
from veil.sql.slots import PARAM, slot

# the integer types a parameter's int is checked against without asking DuckDB
_INT_RANGES = {
    "TINYINT": 7,
    "SMALLINT": 15,
    "INTEGER": 31,
    "BIGINT": 63,
}


@dataclass(frozen=True)
class SlotUse:
    """One ciphertext of a plan made from parameters: the constant and its encryption."""

    node: exp.Expr  # the constant as planned, its bound parameters marked (``PARAM``)
    enc: Encryption
    ciphertext: object  # the planned value's


@dataclass
class Recorder:
    """The slots one planning hands out (``Session.encrypt_constant`` calls ``record``)."""

    places: int  # the statement's parameter markers
    uses: list[SlotUse] = field(default_factory=list)
    covered: set[int] = field(default_factory=set)

    def record(self, node: exp.Expr, enc: Encryption, ciphertext: object) -> object:
        marks = [n.meta[PARAM] for n in node.walk() if PARAM in n.meta]
        if not marks:
            return ciphertext
        marked = slot(ciphertext, len(self.uses))
        if marked is None:  # a ciphertext no slot holds: that marker stays uncovered
            return ciphertext
        self.uses.append(SlotUse(node.copy(), enc, ciphertext))
        self.covered.update(place for place, _ in marks)
        return marked

    @property
    def complete(self) -> bool:
        """Every marker reached the server as a slot (none folded away or kept local)."""
        return bool(self.uses) and len(self.covered) == self.places


@dataclass
class Template:
    uses: list[SlotUse]
    fingerprint: tuple[object, ...]
    values: tuple[object, ...]  # the parameters it was planned with
    verified: bool = False
    refused: bool = False
    # its statements rendered once, each slot's place kept (``veil.sql.slots.Pending``)
    rendered: dict[int, tuple[str, list[object]]] = field(default_factory=dict, repr=False)

    def check(self, fingerprint: tuple[object, ...], values: Sequence[object]) -> None:
        """A second planning, with ``values``, made ``fingerprint``: trust or refuse."""
        if self.verified or self.refused:
            return
        if any(_same(a, b) for a, b in zip(values, self.values, strict=True)):
            return  # a parameter kept its value: the comparison would not show its effect
        self.verified = fingerprint == self.fingerprint
        self.refused = not self.verified

    def fits(self, values: Sequence[object]) -> bool:
        """Do ``values`` repeat one another where the planned values did?

        A plan may rest on two parameters being equal, which no second planning
        with other values in every parameter shows: two fetches whose filters
        have the same values are one statement (``share_fetches``,
        ``share_aggregates``), and answer wrongly once the values part.
        """
        return _repeats(values) == _repeats(self.values)


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b


def _repeats(values: Sequence[object]) -> tuple[int, ...]:
    """Each value's first position among equal values (of the same type)."""
    return tuple(next(j for j in range(i + 1) if _same(values[j], v)) for i, v in enumerate(values))


def shape(params: Sequence[object] | None) -> tuple[tuple[str, str], ...] | None:
    """The parameters' types, as the key of a template (None: no template for them).

    An int's literal type is part of it (``literal`` binds 2**40 as BIGINT, 1 as
    INTEGER, as DuckDB does), so the planner saw the same types.
    """
    if not params or any(p is None for p in params):
        return None
    try:
        return tuple((type(p).__qualname__, _literal_type(p)) for p in params)
    except QueryError:  # a value no literal holds: binding it says so
        return None


def _literal_type(value: object) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        return ""
    # the literal's type changes only at powers of two (INTEGER below 2**31, BIGINT below
    # 2**63, ...): one per type, sign and bit length. Building the cast costs ~0.15 ms,
    # most of a point query's planning (issue 41)
    key = (type(value), value < 0, (~value if value < 0 else value).bit_length())
    found = _INTEGER_TYPES.get(key)
    if found is None:
        node = literal(value)
        found = _INTEGER_TYPES[key] = node.to.sql() if isinstance(node, exp.Cast) else node.key
    return found


_INTEGER_TYPES: dict[tuple[type, bool, int], str] = {}


def fingerprint(plan: SplitPlan, remote_sql: list[str], uses: list[SlotUse]) -> tuple[object, ...]:
    """The plan's run with each slot's ciphertext written as which constant it is.

    Two plannings of one shape agree on this exactly when they differ only in
    their slots. Every statement must have been kept rendered (else a value
    could hide in one rendered anew each run): otherwise the fingerprint is
    unique and never matches.
    """
    if len(remote_sql) != len(plan.rendered):
        return (object(),)
    names = {}
    for use in uses:
        places = tuple(sorted(n.meta[PARAM] for n in use.node.walk() if PARAM in n.meta))
        names[_key(use.ciphertext)] = f"<slot {places} {use.enc.name}>"
    replace = _replacer(names)
    statements = [
        (replace(sql), tuple(names.get(_key(p), repr(p)) for p in params))
        for sql, params in plan.rendered.values()
    ]
    return (plan.local_sql, tuple(statements), tuple(map(replace, remote_sql)))


def _key(value: object) -> tuple[str, object]:
    kind = "int" if isinstance(value, int) else "bytes" if isinstance(value, bytes) else "other"
    return kind, (value if kind != "other" else id(value))


def _replacer(names: dict[tuple[str, object], str]) -> Callable[[str], str]:
    """Ciphertexts a backend wrote into the text (PostgreSQL inlines them) by name."""
    texts = {}
    for (kind, value), name in names.items():
        if kind == "int":
            texts[str(value)] = name
        elif kind == "bytes":
            assert isinstance(value, bytes)
            texts["\\x" + value.hex()] = name
    if not texts:
        return lambda text: text
    pattern = re.compile(
        r"(?<![\w.\\])("
        + "|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))
        + r")(?![\w.])"
    )
    return lambda text: pattern.sub(lambda m: texts[m.group(1)], text)


def substituted(node: exp.Expr, params: Sequence[object]) -> exp.Expr:
    """``node`` with each marked parameter's literal replaced by its value in ``params``."""

    def swap(n: exp.Expr) -> exp.Expr:
        if PARAM in n.meta:
            return literal(params[n.meta[PARAM][1]])
        return n

    return node.copy().transform(swap)


def fast_exact(node: exp.Expr, value: object, type_name: str) -> bool | None:
    """Whether a bare parameter ``value`` is exactly a value of ``type_name``, when that is
    plain without asking DuckDB (None: ask it)."""
    if PARAM not in node.meta:
        return None  # an expression over parameters: DuckDB evaluates it
    if isinstance(value, str) and type_name == "VARCHAR":
        return True
    bits = _INT_RANGES.get(type_name)
    if bits is not None and isinstance(value, int) and not isinstance(value, bool):
        return -(2**bits) <= value < 2**bits
    return None


def binds_as_written(original: str, normal: Normalized) -> bool:
    """Does ``normal`` (``veil.sql.literals``) bound with its values parse to the very tree
    of the text as written? Checked before a normalised statement is planned: a literal
    the token scan misread leaves its statement planned as written."""
    try:
        bound = bind_parameters(parse_statement(normal.text), list(normal.values))
        return bound == parse_statement(original)
    except VeilError:
        return False
