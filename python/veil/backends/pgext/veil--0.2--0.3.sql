-- Upgrade from 0.2: onion layer XOR and JOIN-ADJ re-keying.
\echo Use "ALTER EXTENSION veil UPDATE" to load this file. \quit

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
