"""``veil load`` into a client directory that holds the tables already: refused unless
``--replace``; ``--append`` adds the source's rows as INSERTs, in one transaction."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from veil.dbapi import connect


def _veil(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "veil", *args], capture_output=True, text=True, timeout=300
    )


def _csv(path: Path, first: int, count: int) -> Path:
    lines = ["id,name"] + [f"{i},name {i}" for i in range(first, first + count)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _ids(client: Path) -> list[int]:
    with connect(str(client)) as con:
        return [int(r[0]) for r in con.execute("SELECT id FROM people ORDER BY id").fetchall()]


def test_loading_again_is_refused_replaced_or_appended(tmp_path: Path) -> None:
    client, server = tmp_path / "c", f"duckdb:///{tmp_path / 's.duckdb'}"
    first = _csv(tmp_path / "people.csv", 0, 5)
    done = _veil("load", "--source", str(first), "--server", server, "--client-dir", str(client))
    assert done.returncode == 0, done.stderr
    assert "new master key" in done.stderr and "losing it loses the data" in done.stderr
    with connect(str(client)) as con:
        con.execute("INSERT INTO people VALUES (100, 'written since')")
        con.commit()

    again = _veil("load", "--source", str(first), "--server", server, "--client-dir", str(client))
    assert again.returncode != 0 and "Traceback" not in again.stderr
    assert "--replace" in again.stderr and "--append" in again.stderr
    assert _ids(client) == [0, 1, 2, 3, 4, 100]  # nothing changed

    (tmp_path / "more").mkdir()
    _csv(tmp_path / "more" / "people.csv", 5, 3)
    _csv(tmp_path / "more" / "pets.csv", 0, 2)  # a new table beside: loaded as new
    added = _veil(
        "load", "--source", str(tmp_path / "more"), "--server", server, "--client-dir",
        str(client), "--append",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "3 rows appended" in added.stderr and "new master key" not in added.stderr
    assert _ids(client) == [0, 1, 2, 3, 4, 5, 6, 7, 100]
    with connect(str(client)) as con:
        assert con.execute("SELECT count(*) FROM pets").fetchone() == (2,)

    replaced = _veil(
        "load", "--source", str(first), "--server", server, "--client-dir", str(client),
        "--replace",
    )  # fmt: skip
    assert replaced.returncode == 0, replaced.stderr
    assert _ids(client) == [0, 1, 2, 3, 4]


def test_an_append_that_fails_adds_nothing(tmp_path: Path) -> None:
    client, server = tmp_path / "c", f"duckdb:///{tmp_path / 's.duckdb'}"
    source = tmp_path / "people.csv"
    source.write_text("id,name\n1,a\n2,b\n")
    assert _veil("load", "--source", str(source), "--server", server, "--client-dir",
                 str(client)).returncode == 0  # fmt: skip
    with connect(str(client)) as con:
        con.execute("ALTER TABLE people ADD PRIMARY KEY (id)")
        con.commit()
    source.write_text("id,name\n3,c\n1,again\n")  # the second row repeats a key
    failed = _veil("load", "--source", str(source), "--server", server, "--client-dir",
                   str(client), "--append")  # fmt: skip
    assert failed.returncode != 0 and "Traceback" not in failed.stderr
    assert _ids(client) == [1, 2]
