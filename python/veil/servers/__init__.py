"""Private database servers for tests, benchmarks and demos (tooling, never shipped code).

:mod:`.cassandra` starts and stops a single-node Cassandra on 127.0.0.1;
:mod:`.postgres` a throwaway PostgreSQL cluster (initdb + pg_ctl, free port);
:mod:`.ferretdb` a FerretDB (MongoDB wire) server; :mod:`.ports` free loopback ports.
"""
