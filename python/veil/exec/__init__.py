"""Executing split plans: RemoteSQL fetch, decryption, local DuckDB execution, DML."""
