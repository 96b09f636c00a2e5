-- Upgrade from 0.1: ASHE sums modulo 2^64.
\echo Use "ALTER EXTENSION veil UPDATE" to load this file. \quit

-- ASHE sums: SUM of BIGINTs modulo 2^64 (wrapping), as a BIGINT. The state
-- starts NULL, so the first non-NULL value starts it (a strict transition
-- function) and a group of NULLs sums to NULL, like SUM.
CREATE FUNCTION veil_wrap_add(bigint, bigint) RETURNS bigint
    AS 'MODULE_PATHNAME' LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

CREATE AGGREGATE veil_wrap_sum(bigint) (
    SFUNC = veil_wrap_add,
    STYPE = bigint,
    COMBINEFUNC = veil_wrap_add,
    PARALLEL = SAFE
);
