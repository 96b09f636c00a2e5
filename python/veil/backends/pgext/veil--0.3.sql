-- Veil's server functions. Every one is a pure function of public data
-- (ciphertexts, n^2, search tokens, JOIN-ADJ tokens) or of a layer key the
-- client reveals to peel one onion layer: the server never holds a master key.
\echo Use "CREATE EXTENSION veil" to load this file. \quit

-- Paillier sum: the product modulo n^2 of a column's ciphertexts, each stored
-- as 0x01 || c (big-endian, ceil(bits(n^2)/8) bytes). n^2 is given as unsigned
-- big-endian bytes. NULL ciphertexts are skipped; no rows give NULL.
CREATE FUNCTION veil_hom_sum_step(internal, bytea, bytea) RETURNS internal
    AS 'MODULE_PATHNAME' LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION veil_hom_sum_combine(internal, internal) RETURNS internal
    AS 'MODULE_PATHNAME' LANGUAGE C CALLED ON NULL INPUT PARALLEL SAFE;
CREATE FUNCTION veil_hom_sum_serialize(internal) RETURNS bytea
    AS 'MODULE_PATHNAME' LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION veil_hom_sum_deserialize(bytea, internal) RETURNS internal
    AS 'MODULE_PATHNAME' LANGUAGE C STRICT PARALLEL SAFE;
CREATE FUNCTION veil_hom_sum_final(internal) RETURNS bytea
    AS 'MODULE_PATHNAME' LANGUAGE C STRICT PARALLEL SAFE;

CREATE AGGREGATE veil_hom_sum(bytea, bytea) (
    SFUNC = veil_hom_sum_step,
    STYPE = internal,
    COMBINEFUNC = veil_hom_sum_combine,
    SERIALFUNC = veil_hom_sum_serialize,
    DESERIALFUNC = veil_hom_sum_deserialize,
    FINALFUNC = veil_hom_sum_final,
    PARALLEL = SAFE
);

-- Row by row Paillier addition: a * b mod n^2 (NULL in either gives NULL).
CREATE FUNCTION veil_hom_add(bytea, bytea, bytea) RETURNS bytea
    AS 'MODULE_PATHNAME' LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

-- SWP match: does a SEARCH ciphertext (0x01 || 16-byte words) hold the
-- token's word (token = 0x01 || X(16) || k(16)). NULL gives NULL.
CREATE FUNCTION veil_search_match(bytea, bytea) RETURNS boolean
    AS 'MODULE_PATHNAME' LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

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

-- Onion layers: a column's outer RND layer (row-bound RND under a per-column
-- layer key, AES-256-CTR keyed by the row id) XORed off, or on again. The
-- client reveals the 32-byte layer key to peel the layer:
-- UPDATE t SET c = veil_layer_xor_int(key, row_id, c). NULL gives NULL.
CREATE FUNCTION veil_layer_xor_int(bytea, bigint, bigint) RETURNS bigint
    AS 'MODULE_PATHNAME' LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;
CREATE FUNCTION veil_layer_xor_bytes(bytea, bigint, bytea) RETURNS bytea
    AS 'MODULE_PATHNAME' LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

-- JOIN-ADJ: re-key a ciphertext (0x01 || ristretto255 point) with a token
-- (0x01 || scalar): 0x01 || token * point. NULL gives NULL.
CREATE FUNCTION veil_joinadj_rekey(bytea, bytea) RETURNS bytea
    AS 'MODULE_PATHNAME' LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;
