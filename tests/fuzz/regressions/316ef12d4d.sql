-- seed: 0
-- backend: duckdb
-- hom: auto
-- mode: query
-- params: [{"double": "2.5"}]
-- failure: wrong-result:values
-- detail: F3 (fixed in 4e6c1de): Veil 3, plaintext 2: a float parameter was bound as a DECIMAL literal
SELECT CAST(? AS INTEGER) AS x FROM nation WHERE n_nationkey = 1;
