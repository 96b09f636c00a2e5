"""``veil serve``: Veil behind a PostgreSQL wire-protocol server.

psql, drivers (psycopg, pgjdbc), SQLAlchemy/pandas and BI tools connect to
it as to PostgreSQL. It runs on the trusted side, holds the keys, and answers
each connection with a Veil session of its own over the one client directory;
the untrusted database server stays behind it. The protocol (pgwire, in
Rust: ``veil_wire``) calls ``engine.Engine``; SQL arrives in PostgreSQL's
dialect and is translated (``dialect``), catalogue queries are answered from
the plaintext schema on the client (``catalog``), and results leave as text
columns batch by batch (``text``).
"""
