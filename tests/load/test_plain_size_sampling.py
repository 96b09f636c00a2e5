"""The plaintext's size sampled on a thread while the design is made (``plain_size.Sampling``):
the same sizes as measured in the load's own thread, and a sampling no one waits for stops."""

from __future__ import annotations

import duckdb
import pytest

from veil.design.model import TableDesign
from veil.load import plain_size
from veil.load.sources import SourceTable

pytestmark = pytest.mark.unit

_ROWS = 300_000


def _table(name: str) -> TableDesign:
    return TableDesign(name, f"t_{name}", "c_id", [], [])


def test_sampled_on_a_thread_as_measured_in_the_loads() -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE a AS SELECT range AS k, range % 7 AS g FROM range({_ROWS})")
    con.execute("CREATE TABLE b AS SELECT 'word ' || (range % 50) AS s FROM range(3000)")
    con.execute("CREATE TABLE e AS SELECT 1 AS k WHERE false")
    sources = [SourceTable(n, n) for n in ("a", "b", "e")]
    rows = [_ROWS, 3000, 0]
    sampling = plain_size.Sampling(sources, con)
    try:
        assert sampling.names == ["a", "b", "e"]
        sizes = sampling.sizes()
    finally:
        sampling.close()
    threaded = [_table(s.name) for s in sources]
    measured = list(zip(sources, threaded, rows, strict=True))
    plain_size.set_sizes(measured, [sizes[s.name] for s in sources], con)
    inline = [_table(s.name) for s in sources]
    plain_size.measure_all(list(zip(sources, inline, rows, strict=True)), con)
    assert [t.plain_bytes for t in threaded] == [t.plain_bytes for t in inline]
    assert threaded[0].plain_bytes > 0 and threaded[2].plain_bytes == 0.0
    con.close()


def test_a_sampling_closed_unread_stops() -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE a AS SELECT range AS k FROM range({_ROWS})")
    sampling = plain_size.Sampling([SourceTable("a", "a")] * 3, con)
    sampling.close()  # the design failed: nothing waits for the sizes
    assert con.sql("SELECT count(*) FROM a").fetchall() == [(_ROWS,)]
    con.close()
