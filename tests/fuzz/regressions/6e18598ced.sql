-- seed: 2651
-- backend: postgres
-- hom: always
-- mode: query
-- params: [{"double": "0.0"}]
-- failure: wrong-type:decimalN(N, N) from Veil, double expected
-- detail: F3 (fixed in 4e6c1de): DECIMAL(2,1) from Veil, DOUBLE expected
SELECT ? AS c0 FROM fz_items AS f1;
