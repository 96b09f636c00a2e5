"""JOIN-ADJ builds: the points one peel's builds share (``veil.session.onions.JoinPoints``),
and which side of a join is moved onto the other's key."""

from __future__ import annotations

import pyarrow as pa

from veil.ciphers.columns import JoinCipher, available_schemes
from veil.crypto.joinadj import JoinAdj
from veil.design.model import JOIN, Column, PhysicalDesign
from veil.design.policy import Policy
from veil.designer.onions import onion_design
from veil.session.onions import Adjustment, JoinPoints, Rekey, _join_adjustments, defer_layers


class _Counted(JoinCipher):
    """A JOIN cipher that counts the values it encrypts."""

    def __init__(self, inner: JoinAdj):
        super().__init__(inner)
        self.encrypted = 0

    def encrypt(self, encoded: pa.Array) -> pa.Array:
        self.encrypted += len(encoded)
        return super().encrypt(encoded)


def test_a_second_build_under_the_same_key_reuses_the_points() -> None:
    cipher = _Counted(JoinAdj(b"k" * 32))
    points = JoinPoints()
    orders = pa.array([5, 1, 2, 3, 1, None], pa.int64())
    lines = pa.array([1, 1, 2, 9, None, 5, 5], pa.int64())
    assert points.encrypt(cipher, "a", orders).equals(JoinCipher(cipher._inner).encrypt(orders))
    assert cipher.encrypted == 4
    assert points.encrypt(cipher, "a", lines).equals(JoinCipher(cipher._inner).encrypt(lines))
    assert cipher.encrypted == 5  # only 9 was new


def test_another_key_or_encoding_shares_nothing() -> None:
    cipher = _Counted(JoinAdj(b"k" * 32))
    points = JoinPoints()
    points.encrypt(cipher, "a", pa.array([1, 2], pa.int64()))
    other = JoinAdj(b"o" * 32)
    got = points.encrypt(JoinCipher(other), "b", pa.array([1, 2], pa.int64()))
    assert got.equals(JoinCipher(other).encrypt(pa.array([1, 2], pa.int64())))
    text = pa.array([b"1", b"x"], pa.binary())
    assert points.encrypt(cipher, "a", text).equals(JoinCipher(cipher._inner).encrypt(text))
    assert cipher.encrypted == 4


def _design(built: set[str], rows: dict[str, int]) -> PhysicalDesign:
    """Onion tables ``rows`` (one BIGINT key column ``k`` each), their JOIN onions left for
    their first peel but in the tables of ``built`` (peeled and built)."""
    schema = {name: [Column("k", "BIGINT")] for name in rows}
    design = onion_design(schema, available_schemes(), "fingerprint")
    for name, table in design.tables.items():
        defer_layers(table)
        table.row_count = rows[name]
        if name in built:
            enc = table.onion_of("k", JOIN)
            assert enc is not None
            enc.params.pop("outer")
            enc.params.pop("lazy")
    return design


def test_a_join_moves_an_unbuilt_onion_onto_a_built_class_however_large() -> None:
    design = _design({"part"}, {"part": 100, "lineitem": 600})
    found: list[Adjustment] = []
    _join_adjustments(design, Policy(), [(("lineitem", "k"), ("part", "k"))], found)
    assert Rekey("lineitem", "k", ("part", "k")) in found  # its build takes part's key
    assert not any(isinstance(a, Rekey) and a.table == "part" for a in found)


def test_a_join_of_two_unbuilt_onions_moves_the_smaller() -> None:
    design = _design(set(), {"part": 100, "lineitem": 600})
    found: list[Adjustment] = []
    _join_adjustments(design, Policy(), [(("lineitem", "k"), ("part", "k"))], found)
    assert [a for a in found if isinstance(a, Rekey)] == [Rekey("part", "k", ("lineitem", "k"))]
