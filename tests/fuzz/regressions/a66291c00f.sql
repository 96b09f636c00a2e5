-- seed: 675
-- backend: duckdb
-- hom: always
-- mode: query
-- params: []
-- failure: fallback:run:Parser Error
-- detail: fell back to fetching whole tables: the split plan failed (QueryError: Parser Error: syntax error at or near "AS" (see docs/errors.md#query))
SELECT n.st FROM fz_nested AS n WHERE {'a': 2, 'b': ''} OR TRUE;
