-- seed: 943
-- backend: postgres
-- hom: always
-- mode: query
-- params: []
-- failure: wrong-result:values
-- detail: F1 (fixed by the HOM rework, 918dd52..c9172ac): Veil 12301 (DECIMAL(38,0)), plaintext 12301.04: HOM SUM of an integer column typed DECIMAL(38,0)
SELECT l_extendedprice AS c FROM lineitem WHERE l_orderkey = 1 UNION ALL SELECT SUM(s_nationkey) FROM supplier GROUP BY s_acctbal;
