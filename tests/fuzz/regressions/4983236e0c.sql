-- seed: 4
-- backend: duckdb
-- hom: auto
-- mode: query
-- params: [{"double": "inf"}]
-- failure: veil-error:QueryError
-- detail: F5 (fixed in 4e6c1de): Referenced column "inf" was not found
SELECT count(*) AS n FROM fz_items WHERE ratio < ?;
