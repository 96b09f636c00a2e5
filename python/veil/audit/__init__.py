"""The audit log and the per-statement observation behind it and ``veil serve --metrics``.

Each statement run through ``veil serve`` (on by default) or the DB-API
(``veil.connect(..., audit=True)``) can leave one JSON line in the client
directory's ``audit.jsonl``: who ran it, when, its shape with every literal
and parameter replaced by ``?`` (``shape``), the tables and columns it
decrypted, the rows it returned, the onion layers it peeled, its outcome and
SQLSTATE, and how long it took (``record``). ``observe`` measures a
statement on a session of its own class, so sessions without an audit log or
metrics run the plain ``Session``; ``log`` appends the lines and reads them
back, and ``cli`` is ``veil audit``. The file stays on the trusted side: it
never reaches the database server and holds no plaintext value.
"""
