"""Veil's crypto core: keys and the encryption schemes over whole columns.

The crypto core knows nothing of SQL. Each scheme offers a batch API (an Arrow
or numpy column in, a column out; NULL stays NULL) and a scalar convenience API.
"""
