"""A fresh process's first query pays for no import it does not need (issue 41).

pyarrow imports pandas (0.3 s) on its first conversion of Python objects;
``veil.pandas_deferred`` keeps that import from happening on Veil's behalf,
and an application's own pandas still works with pyarrow as before. These
run in a new interpreter: the test process itself may have pandas loaded.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from veil.load.loader import load


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fresh")
    source = root / "source"
    source.mkdir()
    (source / "people.csv").write_text("id,name,born\n1,ann,1990-01-02\n2,bob,1985-05-06\n")
    workload = ["SELECT name FROM people WHERE id = 2", "SELECT id FROM people WHERE name = 'ann'"]
    load(str(source), f"duckdb:///{root / 'srv.duckdb'}", str(root / "c"), workload)
    return root / "c"


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_first_query_does_not_import_pandas(client: Path) -> None:
    out = _run(
        f"""
        import sys
        import veil
        with veil.connect({str(client)!r}) as con:
            rows = con.execute("SELECT name FROM people WHERE id = 2").fetchall()
            rows += con.execute("SELECT id FROM people WHERE name = 'ann'").fetchall()
        print(rows, "pandas" in sys.modules)
        """
    )
    assert out == "[('bob',), (1,)] False"


def test_the_applications_pandas_works_with_pyarrow_after_veil_ran(client: Path) -> None:
    out = _run(
        f"""
        import veil
        with veil.connect({str(client)!r}) as con:
            con.execute("SELECT name FROM people WHERE id = 2").fetchall()
        import pandas as pd
        import pyarrow as pa
        stamps = pd.Series(pd.to_datetime(["2020-01-01"]).tz_localize("UTC"))
        frame = pd.DataFrame({{"c": pd.Categorical(["x", "y"])}})
        print(pa.array(stamps).type, pa.Table.from_pandas(frame).schema.field("c").type)
        with veil.connect({str(client)!r}) as con:
            print(con.execute("SELECT name FROM people WHERE id = 1").fetchall())
        """
    )
    assert out.splitlines() == [
        "timestamp[us, tz=UTC] dictionary<values=large_string, indices=int8, ordered=0>",
        "[('ann',)]",
    ]


def test_pandas_loaded_before_veil_is_left_alone(client: Path) -> None:
    out = _run(
        f"""
        import sys
        import pandas
        import veil
        with veil.connect({str(client)!r}) as con:
            con.execute("SELECT name FROM people WHERE id = 2").fetchall()
        print(any(type(f).__module__ == "veil.pandas_deferred" for f in sys.meta_path))
        """
    )
    assert out == "False"
