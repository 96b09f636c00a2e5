-- seed: 626273
-- backend: duckdb
-- hom: auto
-- mode: query
-- params: []
-- failure: wrong-result:values
-- detail: Veil row (False, 356) not expected; nearest expected (False, 89): the DET flag stayed a ciphertext in the local plan (compare_ciphertexts took IS TRUE for IS NULL), and a ciphertext IS TRUE
SELECT f4.flag IS NOT TRUE AS c0, count(*) AS n FROM fz_items AS f4 GROUP BY 1;
