/*
 * ASHE sums on the server: the sum of BIGINT ciphertexts modulo 2^64.
 *
 * An ASHE ciphertext is m + pad (mod 2^64); the client removes the pads of a
 * sum and needs nothing but the sum's low 64 bits. PostgreSQL's SUM(bigint)
 * accumulates exactly in numeric, which costs several times a machine
 * addition; veil_wrap_sum adds in unsigned 64-bit arithmetic instead, which
 * wraps (C defines unsigned overflow), and returns the bits as a BIGINT.
 */
#include "postgres.h"

#include "fmgr.h"

PG_FUNCTION_INFO_V1(veil_wrap_add);

Datum
veil_wrap_add(PG_FUNCTION_ARGS)
{
	uint64		a = (uint64) PG_GETARG_INT64(0);
	uint64		b = (uint64) PG_GETARG_INT64(1);

	PG_RETURN_INT64((int64) (a + b));
}
