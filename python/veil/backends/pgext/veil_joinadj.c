/*
 * JOIN-ADJ re-keying on the server (rust/veil-kernels joinadj.rs,
 * veil.crypto.joinadj).
 *
 * A ciphertext is 0x01 || encode(P), P a ristretto255 point; a token is
 * 0x01 || t, t a canonical non-zero scalar (little-endian, below the group
 * order l). rekey(token, c) = 0x01 || encode(t * P).
 *
 * libsodium's crypto_scalarmult_ristretto255 does the work and gives the
 * same bytes as curve25519-dalek: it decodes P per RFC 9496 (refusing
 * non-canonical encodings), neither clamps nor reduces the scalar (it only
 * clears bit 255, which a scalar below l never has set), encodes the result
 * canonically, and fails when the result is the identity (so when P is the
 * identity, which no ciphertext is: t * P is never it for P != identity and
 * t != 0 in a group of prime order).
 */
#include "postgres.h"

#include <sodium.h>
#include <string.h>

#include "fmgr.h"

#define JOINADJ_VERSION 0x01
#define JOINADJ_LEN 33			/* version byte + 32: ciphertexts and tokens */

PG_FUNCTION_INFO_V1(veil_joinadj_rekey);

/* The group order l, little-endian. */
static const unsigned char group_order[32] = {
	0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10,
};

/* 0 < scalar < l (the token is public: no need for constant time). */
static bool
scalar_is_canonical_nonzero(const unsigned char *scalar)
{
	bool		zero = true;

	for (int i = 0; i < 32; i++)
		zero = zero && scalar[i] == 0;
	if (zero)
		return false;
	for (int i = 31; i >= 0; i--)
		if (scalar[i] != group_order[i])
			return scalar[i] < group_order[i];
	return false;				/* equal to l */
}

static void
init_sodium(void)
{
	static bool ready = false;

	if (ready)
		return;
	if (sodium_init() < 0)
		elog(ERROR, "veil: libsodium could not be initialised");
	ready = true;
}

/* veil_joinadj_rekey(token bytea, c bytea) -> bytea */
Datum
veil_joinadj_rekey(PG_FUNCTION_ARGS)
{
	bytea	   *token_arg = PG_GETARG_BYTEA_PP(0);
	bytea	   *value = PG_GETARG_BYTEA_PP(1);
	const unsigned char *token = (const unsigned char *) VARDATA_ANY(token_arg);
	const unsigned char *in = (const unsigned char *) VARDATA_ANY(value);
	bytea	   *result;
	unsigned char *out;

	if (VARSIZE_ANY_EXHDR(token_arg) != JOINADJ_LEN || token[0] != JOINADJ_VERSION
		|| !scalar_is_canonical_nonzero(token + 1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("veil: a JOIN-ADJ token is %d bytes: 0x01 and a canonical non-zero scalar",
						JOINADJ_LEN)));
	if (VARSIZE_ANY_EXHDR(value) != JOINADJ_LEN || in[0] != JOINADJ_VERSION)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("veil: malformed JOIN-ADJ ciphertext (%d bytes)",
						(int) VARSIZE_ANY_EXHDR(value)),
				 errhint("A JOIN-ADJ value is 0x01 followed by a 32-byte ristretto255 point.")));
	init_sodium();
	result = (bytea *) palloc(VARHDRSZ + JOINADJ_LEN);
	SET_VARSIZE(result, VARHDRSZ + JOINADJ_LEN);
	out = (unsigned char *) VARDATA(result);
	out[0] = JOINADJ_VERSION;
	if (crypto_scalarmult_ristretto255(out + 1, token + 1, in + 1) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("veil: malformed JOIN-ADJ ciphertext: not a canonical ristretto255 point, "
						"or the identity")));
	PG_RETURN_BYTEA_P(result);
}
