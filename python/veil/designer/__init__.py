"""The designer: which encryptions to store, chosen from a workload of queries.

It reads SQL (``veil.sql``'s parser and scope analysis) and writes a
``veil.design`` physical design; the planner reads designs, never the
designer, so the packages form no cycle.
"""
