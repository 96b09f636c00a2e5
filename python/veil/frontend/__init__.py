"""Veil's SQL front-ends: the ``veil load/query/explain`` commands.

They drive the shipping packages (load, exec, sql) for a user at a terminal;
nothing in the engine imports them.
"""
