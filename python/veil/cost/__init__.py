"""The cost model and plan choice (MONOMI §6.4): server and client time of a split plan.

Reaches the session only through ``context.CostContext``.
"""
