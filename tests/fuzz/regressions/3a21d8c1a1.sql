-- seed: 2321
-- backend: duckdb
-- hom: always
-- mode: query
-- params: [{"decimal": "15"}]
-- failure: wrong-type:intN from Veil, decimalN(N, N) expected
-- detail: F3 (fixed in 4e6c1de): INTEGER from Veil, DECIMAL(2,0) expected
WITH cte6 AS (SELECT ? AS c0 FROM supplier AS s1) SELECT c10.c0 AS c0 FROM cte6 AS c10;
