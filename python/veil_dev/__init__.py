"""Veil's developer tooling: benchmarks, TPC-H, private test servers and ``veil demo``.

``veil_dev`` sits beside ``veil`` in a checkout (``python/veil_dev``) and is not
part of the wheel: maturin packs only ``python/veil``, so ``pip install veil``
gets none of it, nor its dependencies (matplotlib, tpchgen-cli: the ``bench``
extra). The editable install that ``make setup`` makes (``pip install -e
'.[dev,spark,bench]'``) puts ``python/`` on the path, so both import there.

- ``bench``: ``veil bench ...``, ``veil kv ...`` and ``veil documents ...``, the
  benchmarks beside their baselines, and the result comparison the oracles use.
- ``tpch``: ``veil tpch gen|queries``, TPC-H data (tpchgen-cli) and the 22 queries.
- ``servers``: throwaway PostgreSQL, Cassandra, Spark, FerretDB and
  mongo-java-server processes for the tests and the benchmarks.
- ``demo``: ``veil demo``, TPC-H through Veil checked against plaintext DuckDB.

The tooling imports ``veil``; ``veil`` never imports the tooling
(tests/structure/test_imports.py). ``veil.cli`` finds the commands of
:mod:`veil_dev.cli` by name when this package is importable.
"""
