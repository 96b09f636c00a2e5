-- seed: 614926
-- backend: duckdb
-- hom: auto
-- mode: query
-- params: []
-- failure: wrong-type:decimalN(N, N) from Veil, decimalN(N, N) expected
-- detail: result column types decimal128(38, 0) from Veil, decimal128(38, 2) expected
SELECT * FROM (SELECT d2.c2 AS c0, d2.c1 AS c1 FROM (SELECT o1.o_orderkey AS c1, SUM(o1.o_custkey) AS c2 FROM orders AS o1 GROUP BY o1.o_orderkey) AS d2 EXCEPT ALL SELECT GREATEST(r3.r_regionkey, 100.00) AS c0, r3.r_regionkey AS c1 FROM region AS r3) AS s;
