-- seed: 26
-- backend: duckdb
-- hom: auto
-- mode: query
-- params: [1]
-- failure: veil-error:InternalError
-- detail: F4 (fixed in d995018): TokenError: Error tokenizing 'SELECT $1 AS x FROM nation WHERE n_name < ''
SELECT ? AS x FROM nation WHERE n_name < '';
