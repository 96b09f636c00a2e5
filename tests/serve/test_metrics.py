"""``veil serve --metrics`` (issue 42, item 5): Prometheus metrics scraped over HTTP.

The text format is read back with prometheus_client's own parser, during and
after statements sent with psycopg: statements by kind and outcome, latency
histograms per phase, plan-cache hits, peels, open sessions, errors by
SQLSTATE and fallbacks by shape. The last test starts ``veil serve`` itself, as a user would.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

import veil.sql.planner as planner
from veil._native import WireServer
from veil.audit.log import AUDIT_FILE, read_records
from veil.load.loader import load
from veil.serve.engine import Engine
from veil.serve.metrics import Metrics, MetricsError

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def make_client_dir(root: Path) -> Path:
    """40 accounts from a CSV file, loaded as onions (the first range query peels OPE)."""
    lines = ["id,owner,balance", *(f"{i},owner {i % 7},{i * 10}" for i in range(1, 41))]
    (root / "accounts.csv").write_text("\n".join(lines) + "\n")
    server = f"duckdb:///{root / 'server.duckdb'}"
    load(str(root / "accounts.csv"), server, str(root / "client"), progress=lambda _: None)
    return root / "client"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Metrics, Path]]:
    """A server with metrics on a free port and no audit log: (wire port, metrics, client)."""
    client = make_client_dir(tmp_path_factory.mktemp("metrics"))
    metrics = Metrics("127.0.0.1:0")
    engine = Engine(client, metrics=metrics)
    server = WireServer(engine, "127.0.0.1:0", None, None, True)
    yield server.address.rsplit(":", 1)[1], metrics, client
    server.stop()
    engine.close()


def scrape(address: str) -> Samples:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_statements_phases_and_errors(served: tuple[str, Metrics, Path]) -> None:
    port, metrics, client = served
    before = scrape(metrics.address)
    with psycopg.connect(f"host=127.0.0.1 port={port} user=eve dbname=veil") as con:
        con.autocommit = True
        con.execute("SELECT 1").fetchall()  # the session opens with the first statement
        during = scrape(metrics.address)
        assert value(during, "veil_open_sessions") == value(before, "veil_open_sessions") + 1
        for _ in range(3):
            con.execute(
                "SELECT owner FROM accounts WHERE balance > %s ORDER BY id", [200]
            ).fetchall()
        con.execute("INSERT INTO accounts VALUES (%s, %s, %s)", [200, "new", 5])
        with pytest.raises(psycopg.Error) as failed:
            con.execute("SELECT missing_column FROM accounts")
    after = scrape(metrics.address)
    for _ in range(100):  # the server ends the session just after the client leaves
        if value(after, "veil_open_sessions") == value(before, "veil_open_sessions"):
            break
        time.sleep(0.05)
        after = scrape(metrics.address)
    assert value(after, "veil_open_sessions") == value(before, "veil_open_sessions")
    grew = {
        key: after[key] - before.get(key, 0.0) for key in after if after[key] != before.get(key)
    }
    assert value(grew, "veil_statements_total", kind="query", outcome="ok") == 3
    assert value(grew, "veil_statements_total", kind="catalog", outcome="ok") == 1
    assert value(grew, "veil_statements_total", kind="dml", outcome="ok") == 1
    assert value(grew, "veil_statements_total", kind="query", outcome="error") == 1
    assert value(grew, "veil_errors_total", sqlstate=failed.value.sqlstate or "") == 1
    assert value(grew, "veil_plan_cache_hits_total") == 2  # the second and third run
    assert value(grew, "veil_peels_total") >= 1  # balance's OPE layer came off for the first
    assert value(grew, "veil_rows_total") >= 1
    for phase in ("parse", "plan", "encrypt", "fetch", "server", "decrypt", "local"):
        assert value(grew, "veil_phase_seconds_count", phase=phase) >= 1, phase
        assert value(grew, "veil_phase_seconds_sum", phase=phase) > 0, phase
    assert value(grew, "veil_statement_seconds_count", kind="query") == 4
    assert not (client / AUDIT_FILE).exists()  # Engine's audit log is the CLI's choice


@pytest.mark.fallback_expected
def test_fallbacks_are_counted_by_stage_and_shape(
    served: tuple[str, Metrics, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, metrics, _ = served

    def broken(state: object) -> object:
        raise RuntimeError("an optimisation's bug")

    monkeypatch.setattr(planner, "PASSES", (*planner.PASSES[:3], broken, *planner.PASSES[3:]))
    before = scrape(metrics.address)
    with psycopg.connect(f"host=127.0.0.1 port={port} user=eve dbname=veil") as con:
        con.autocommit = True
        rows = con.execute("SELECT count(*) FROM accounts WHERE owner = 'owner 3'").fetchall()
    assert rows == [(6,)]  # right, by fetching the whole table
    grew = value(
        scrape(metrics.address), "veil_fallbacks_total", stage="plan", reason="pass broken"
    )
    assert grew == value(before, "veil_fallbacks_total", stage="plan", reason="pass broken") + 1


def test_a_bad_address_is_a_clear_error() -> None:
    with pytest.raises(MetricsError, match="ADDRESS:PORT"):
        Metrics("9187")


def test_veil_serve_audits_by_default_and_serves_metrics(tmp_path: Path) -> None:
    client = make_client_dir(tmp_path)
    command = [sys.executable, "-m", "veil.cli", "serve", str(client), "--listen", "127.0.0.1:0"]
    with subprocess.Popen(
        [*command, "--insecure-local", "--metrics", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as server:
        try:
            lines = [server.stdout.readline() for _ in range(4)]  # type: ignore[union-attr]
            port = lines[0].split(" on ")[1].split()[0].rsplit(":", 1)[1]
            assert f"audit log {client / AUDIT_FILE}" in lines[2]
            address = lines[3].split("http://")[1].split("/")[0]
            with psycopg.connect(f"host=127.0.0.1 port={port} user=frank dbname=veil") as con:
                assert con.execute("SELECT count(*) FROM accounts").fetchall() == [(40,)]
            samples = scrape(address)
            assert value(samples, "veil_statements_total", kind="query", outcome="ok") >= 1
        finally:
            server.terminate()
            server.wait(30)
    records = read_records(client / AUDIT_FILE)[0]
    assert [(r["user"], r["statement"]) for r in records] == [
        ("frank", "BEGIN"),  # psycopg opens a transaction
        ("frank", "SELECT COUNT(*) FROM accounts"),
        ("frank", "COMMIT"),
    ]


def test_log_level_debug_shows_each_statements_phases(tmp_path: Path) -> None:
    client = make_client_dir(tmp_path)
    command = [sys.executable, "-m", "veil.cli", "serve", str(client), "--listen", "127.0.0.1:0"]
    with subprocess.Popen(
        [*command, "--insecure-local", "--no-audit", "--log-level", "debug"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as server:
        try:
            line = server.stdout.readline()  # type: ignore[union-attr]
            port = line.split(" on ")[1].split()[0].rsplit(":", 1)[1]
            with psycopg.connect(
                f"host=127.0.0.1 port={port} user=frank dbname=veil", autocommit=True
            ) as con:
                for _ in range(2):
                    con.execute("SELECT count(*) FROM accounts WHERE id < %s", [7]).fetchall()
        finally:
            server.terminate()
            _, err = server.communicate(timeout=30)
    logged = [line for line in err.splitlines() if "veil.statements" in line]
    assert len(logged) == 2, err
    assert all("SELECT COUNT(*) FROM accounts WHERE id < ?" in line for line in logged), logged
    assert all("server " in line and "plan " in line for line in logged), logged
    assert "7" not in logged[0].split("): ")[1]  # the shape, its value redacted
