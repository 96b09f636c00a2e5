"""A fresh process imports nothing big that its first query does not use (issue 41).

Each import below cost a fresh `veil query` tens to hundreds of milliseconds
for nothing: ``pyarrow.acero`` (``Table.group_by``) brings ``pyarrow.dataset``
with Parquet, ORC, Substrait and the cloud filesystems; ``multiprocessing``
and ``concurrent.futures.process`` serve only Paillier's worker pool. These run
in new interpreters: the test process itself has imported everything.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

_HEAVY = ("pyarrow.acero", "pyarrow.dataset", "multiprocessing", "concurrent.futures.process")


def _loaded_after(code: str) -> list[str]:
    """The modules of ``_HEAVY`` a new interpreter has loaded after running ``code``."""
    program = (
        textwrap.dedent(code) + f"\nprint(' '.join(m for m in {_HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + program],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_session_imports_no_worker_pool_nor_dataset() -> None:
    assert _loaded_after("import veil.session.session, veil.statements") == []


def test_a_client_reaggregation_does_not_import_pyarrow_acero() -> None:
    code = """
        import pyarrow as pa
        import veil.session.session
        from veil.exec.hom_fetch import _reaggregate_arrow
        from veil.sql.plan import AggregateItem, Aggregation

        items = [AggregateItem(key=0, kind="COUNT", enc=None)]
        for keys in ([], ["k"]):
            partial = pa.table({"k": ["a", "b", "a"], "__veil_agg_0": [1, 2, 3]})
            done = _reaggregate_arrow(partial, Aggregation(keys=keys, items=items))
            assert sorted(done.column("__veil_agg_0").to_pylist()) == ([6] if not keys else [2, 4])
    """
    assert _loaded_after(code) == []
