"""A client directory's session: parse -> peel -> plan -> choose -> run, and its writes.

``session.Session`` is the entry point; the modules beside it are its
statements' helpers (DML, constraints, foreign keys, sequences, row and
table locks, onion peels, the plan cache). They see the session only
through ``context.SessionContext``, so none imports ``session``.
"""
