"""Value domains: type ranges, declared domains, and per-row expressions' bounds."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from veil.ciphers.hom_group import HomGroupCipher, OverflowedRowsError
from veil.ciphers.sources import Sources
from veil.crypto.hom import sum_ciphertexts
from veil.crypto.keys import MasterKey
from veil.design.domains import (
    DeclaredDomainError,
    check_declared,
    declare_domains,
    expression_domain,
    parse_domain_specs,
    signed_bits,
    type_domain,
)
from veil.design.model import Column, HomGroup
from veil.encoding import SqlType, ValueOverflowError, decode
from veil.errors import DomainError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("type_name", "bits"),
    [
        ("SMALLINT", 16),
        ("INTEGER", 32),
        ("BIGINT", 64),
        ("UINTEGER", 33),
        ("DATE", 32),
        ("TIMESTAMP", 64),
        ("DECIMAL(15,2)", 51),
        ("DECIMAL(18,6)", 61),
        ("DECIMAL(4,1)", 15),
        ("BOOLEAN", 2),
        ("DOUBLE", 64),
    ],
)
def test_type_domains_cover_every_value(type_name: str, bits: int) -> None:
    domain = type_domain(SqlType(type_name))
    assert domain is not None and signed_bits(*domain) == bits


def test_signed_bits_is_the_tightest_width() -> None:
    assert signed_bits(-128, 127) == 8
    assert signed_bits(-129, 0) == 9
    assert signed_bits(0, 128) == 9
    assert signed_bits(1, 50) == 7
    assert signed_bits(-(2**63), 2**63 - 1) == 64


def test_declared_domains_parse_cast_and_check() -> None:
    specs = parse_domain_specs(["T.q=0..100", "t.d=1992-01-01..1998-12-31", "t.p=-9.5..9.5"])
    assert specs == {
        "t.q": ("0", "100"),
        "t.d": ("1992-01-01", "1998-12-31"),
        "t.p": ("-9.5", "9.5"),
    }
    columns = [Column("q", "INTEGER"), Column("d", "DATE"), Column("p", "DECIMAL(4,1)")]
    declare_domains({"t": columns}, specs)
    assert [c.bounds for c in columns] == [[0, 100], [8035, 10591], [-95, 95]]
    check_declared(columns[0], 0, 100)
    with pytest.raises(DeclaredDomainError, match=r"'t\.q'.*declared.*domain: 0\.\.100"):
        check_declared(columns[0], -1, 5, table="t")
    for bad in (["t.q=1:100"], ["q=1..2"], ["t.q=..5"]):
        with pytest.raises(DomainError, match=r"TABLE\.COLUMN=LOW\.\.HIGH"):
            parse_domain_specs(bad)
    with pytest.raises(DomainError, match="is not a INTEGER"):
        declare_domains({"t": [Column("q", "INTEGER")]}, {"t.q": ("x", "5")})
    with pytest.raises(DomainError, match="empty"):
        declare_domains({"t": [Column("q", "INTEGER")]}, {"t.q": ("5", "1")})
    with pytest.raises(DomainError, match="lacks"):
        declare_domains({"t": columns}, {"t.nope": ("1", "2")})


def test_expression_domains_follow_duckdb_types_and_declared_inputs() -> None:
    price, disc = Column("price", "DECIMAL(15,2)"), Column("disc", "DECIMAL(15,2)")
    columns = {"price": price, "disc": disc, "n": Column("n", "INTEGER")}
    # DuckDB computes the product in DECIMAL(18,4) and fails beyond it
    found = expression_domain("price * (1 - disc)", "DECIMAL(18,4)", columns)
    assert found is not None and (found.low, found.high) == (-(10**18 - 1), 10**18 - 1)
    assert found.type == "DECIMAL(18,4)" and found.overflow
    # declared inputs bound it tightly: no overflow possible
    price.bounds, disc.bounds = [0, 10_000_000], [0, 10]
    found = expression_domain("price * (1 - disc)", "DECIMAL(18,4)", columns)
    assert found is not None and not found.overflow
    assert (found.low, found.high) == (0, 100_000 * 10**4)
    # wider than int64: stored as DECIMAL(18,s) only when proven to fit, else not at all
    found = expression_domain("price + n", "DECIMAL(38,2)", columns)
    assert found is not None and found.type == "DECIMAL(18,2)" and not found.overflow
    price.bounds = None
    assert expression_domain("price * price * price", "DECIMAL(38,6)", columns) is None
    assert expression_domain("n * n", "INTEGER", columns).overflow  # type: ignore[union-attr]


def test_overflow_marks_fail_decoding() -> None:
    with pytest.raises(ValueOverflowError, match="beyond DECIMAL"):
        decode(pa.array([5, 10**18], pa.int64()), SqlType("DECIMAL(18,4)"))
    assert decode(pa.array([10**18 - 1]), SqlType("DECIMAL(18,4)")).to_pylist()[0] is not None


def test_overflow_flags_send_sums_over_overflowed_rows_to_the_client() -> None:
    group = HomGroup("t_side", "c_slot", ["a * b"], ["BIGINT"], "hom:o", value_bits=64)
    group.overflow_flags = True
    cipher = HomGroupCipher.sized(MasterKey(b"\x09" * 32), group)
    assert cipher.rows == 8  # a 96-bit slot and a 34-bit flag counter a row

    marked = Sources()  # what TableEncryptor.sources returns
    marked["a * b"] = pa.array([2**63 - 1, None, -(2**63), 5])
    marked.overflow["a * b"] = np.array([0, 1, 0, 0], np.int8)
    values = cipher.values(marked)
    assert values[:, 1].tolist() == [0, 1, 0, 0]
    side = cipher.encrypt_packs(values, 0)
    product = sum_ciphertexts(side.column("ct"), cipher.n_square)
    assert cipher.masked_sums(pa.array([product], pa.binary()), [0b1101]) == [[4]]
    with pytest.raises(OverflowedRowsError):
        cipher.masked_sums(pa.array([product], pa.binary()), [0b0010])
