"""The Paillier sum on Spark: the JVM aggregate and the Python UDF give the same ciphertexts."""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator

import pyarrow as pa
import pytest
from sqlglot import exp

from veil.backends import BackendError, n_square_bytes, render, spark_jvm
from veil.backends.spark import SparkBackend
from veil.crypto import hom

pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.skipif(shutil.which("javac") is None, reason="no JDK: Spark uses the Python UDF"),
]


@pytest.fixture(scope="module")
def paillier() -> hom.PaillierKey:
    return hom.PaillierKey.from_seed(bytes(range(32)), bits=512)


@pytest.fixture
def backends(spark_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, SparkBackend]]:
    jvm = SparkBackend(spark_url)
    monkeypatch.setenv("VEIL_SPARK_HOM", "python")
    python = SparkBackend(spark_url)  # the same warehouse and application, the Python UDF
    yield {"jvm": jvm, "python": python}
    jvm.close()
    python.close()


def _sums(backend: SparkBackend, key: hom.PaillierKey, where: str = "TRUE") -> dict[int, bytes]:
    total = backend.hom_sum(exp.column("c", quoted=True), exp.Placeholder(this="1"))
    query = (
        exp.select(exp.column("g", quoted=True), total).from_("t_h").where(where).group_by('"g"')
    )
    rows = backend.execute(render(query, backend.dialect), [n_square_bytes(key.public.n_square)])
    return dict(zip(rows.column(0).to_pylist(), rows.column(1).to_pylist(), strict=True))


def test_the_jvm_aggregate_is_used_where_a_jdk_builds_it(backends: dict[str, SparkBackend]) -> None:
    assert spark_jvm.jar() is not None
    sql = render(exp.select(backends["jvm"].hom_sum(exp.column("c"), exp.column("n"))), "spark")
    assert "veil_hom_sum_jvm" in sql.lower()
    python = render(
        exp.select(backends["python"].hom_sum(exp.column("c"), exp.column("n"))), "spark"
    )
    assert "collect_list" in python.lower()


def test_both_paths_give_the_client_side_sums(
    backends: dict[str, SparkBackend], paillier: hom.PaillierKey
) -> None:
    rng = random.Random(7)
    groups = [rng.randrange(40) for _ in range(3_000)]
    values = [None if rng.random() < 0.1 else rng.randrange(-(2**40), 2**40) for _ in groups]
    groups += [99, 99]  # a group of NULLs only sums to NULL, like SQL's SUM
    values += [None, None]
    present = iter(paillier.encrypt_ints([v for v in values if v is not None]))
    ciphertexts = pa.array([None if v is None else next(present) for v in values], pa.binary())
    backends["jvm"].bulk_load(
        "t_h", pa.table({"g": pa.array(groups, pa.int64()), "c": ciphertexts})
    )

    jvm, python = _sums(backends["jvm"], paillier), _sums(backends["python"], paillier)
    assert jvm == python
    assert jvm[99] is None
    expected = {g: 0 for g in groups if g != 99}
    for g, v in zip(groups, values, strict=True):
        if v is not None:
            expected[g] += v
    decrypted = paillier.decrypt_ints([jvm[g] for g in sorted(expected)])
    assert decrypted == [expected[g] for g in sorted(expected)]
    assert _sums(backends["jvm"], paillier, where='"g" > 1000') == {}


def test_the_jvm_aggregate_refuses_what_is_not_a_ciphertext_of_the_key(
    backends: dict[str, SparkBackend], paillier: hom.PaillierKey
) -> None:
    backend = backends["jvm"]
    good = paillier.encrypt_ints([5])[0]
    for bad in (b"\x01\x02", b"\x02" + good[1:], b"\x01" + b"\xff" * (len(good) - 1)):
        backend.bulk_load("t_h", pa.table({"g": pa.array([1, 1]), "c": pa.array([good, bad])}))
        with pytest.raises(BackendError):
            _sums(backend, paillier)
