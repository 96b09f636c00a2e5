"""The TPC-DS query set the benchmark runs: ``qNN.sql`` files in a folder.

The 79 queries (of TPC-DS's 99) live in the shared benchmark folder beside the
repository (``<repo>/../shared/tpcds/queries``, in DuckDB's dialect), not in the
repository's tests: the benchmark runs whatever set it is given (``--queries DIR``).
"""

from __future__ import annotations

from pathlib import Path

from veil_dev.tpcds.gen import TpcdsError

DEFAULT_QUERY_DIR = Path(__file__).resolve().parents[3].parent / "shared" / "tpcds" / "queries"


def query_texts(directory: Path = DEFAULT_QUERY_DIR) -> dict[str, str]:
    """Every ``q*.sql`` of ``directory`` as {"q01": SQL}, in order."""
    found = {p.stem: p.read_text(encoding="utf-8") for p in sorted(directory.glob("q*.sql"))}
    if not found:
        raise TpcdsError(
            f"no TPC-DS queries (q*.sql) in {directory}; pass --queries DIR, or lay the shared "
            "folder beside the repository (../shared/tpcds/queries)"
        )
    return found
