"""Tooling for the key-value layer: ``veil kv bench`` and ``veil kv packsize``.

YCSB-style workloads over Veil's packs and two baselines (:mod:`.ycsb`, with
the clients in :mod:`.clients`), the compression-against-pack-size figure
(:mod:`.packsize`) and the offline record datasets both read
(:mod:`.datasets`). The shipping :mod:`veil.kv` imports none of this.
"""
