"""TPC-H: data generation (through ``tpchgen-cli``) and the 22 queries."""
