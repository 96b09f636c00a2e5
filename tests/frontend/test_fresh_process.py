"""The `veil` command's first query pays for no import it does not need (issue 41).

pyarrow imports pandas (0.3 s) on its first conversion of Python objects;
``veil.pandas_deferred`` keeps the `veil` command from doing so, and leaves an
application's process (``import veil``) exactly as pyarrow has it. These run
in new interpreters: the test process itself may have pandas loaded.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from veil.load.loader import load

_FINDER = 'any(type(f).__module__ == "veil.pandas_deferred" for f in sys.meta_path)'


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fresh")
    source = root / "source"
    source.mkdir()
    (source / "people.csv").write_text("id,name,born\n1,ann,1990-01-02\n2,bob,1985-05-06\n")
    workload = ["SELECT name FROM people WHERE id = 2", "SELECT id FROM people WHERE born < ?"]
    load(str(source), f"duckdb:///{root / 'srv.duckdb'}", str(root / "c"), workload)
    return root / "c"


def _run(code: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()


def _command(client: Path, sql: str, before: str = "") -> str:
    """Python running `veil query CLIENT SQL` as the `veil` program does."""
    return f"""
        import sys
        {before}
        from veil.cli import main
        sys.argv = ["veil", "query", {str(client)!r}, {sql!r}]
        main()
        print("pandas" in sys.modules, {_FINDER})
        """


def test_the_commands_first_query_does_not_import_pandas(client: Path) -> None:
    out = _run(
        _command(client, "SELECT name FROM people WHERE id = 2 AND born < DATE '2000-01-01'")
    )
    assert "bob" in "\n".join(out) and out[-1] == "False True"


def test_pandas_loaded_first_is_left_alone(client: Path) -> None:
    out = _run(_command(client, "SELECT name FROM people WHERE id = 1", before="import pandas"))
    assert "ann" in "\n".join(out) and out[-1] == "True False"


def test_an_applications_process_keeps_pyarrows_pandas(client: Path) -> None:
    out = _run(
        f"""
        import sys
        import veil
        from veil.cli import main
        main(["tables", {str(client)!r}])  # the command's code called by a program
        with veil.connect({str(client)!r}) as con:
            con.execute("SELECT name FROM people WHERE id = 2").fetchall()
        print({_FINDER})
        import pandas as pd
        import pyarrow as pa
        print(pa.array([pd.NA, 1], from_pandas=True).to_pylist())
        print(pa.array(pd.Series(pd.to_datetime(["2020-01-01"]).tz_localize("UTC"))).type)
        """
    )
    assert out[-3:] == ["False", "[None, 1]", "timestamp[us, tz=UTC]"]
