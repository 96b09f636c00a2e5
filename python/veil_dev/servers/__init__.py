"""Private database servers for tests, benchmarks and demos (tooling, never shipped code).

:mod:`.cassandra` starts and stops a single-node Cassandra on 127.0.0.1;
:mod:`.postgres` a throwaway PostgreSQL cluster (initdb + pg_ctl, free port);
:mod:`.ferretdb` a FerretDB and :mod:`.mongojava` a mongo-java-server, the two
MongoDB-wire servers, both run by :mod:`.process`; :mod:`.ports` free loopback
ports, :mod:`.builds` the build lock, :mod:`.maven` jars from Maven Central.
"""
