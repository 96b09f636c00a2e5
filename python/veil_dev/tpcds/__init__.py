"""TPC-DS data (``veil tpcds gen``) and the shared query set the benchmark runs."""
