/*
 * Paillier addition on the server: E(x) * E(y) mod n^2 = E(x + y).
 *
 * A stored ciphertext is 0x01 || c, c big-endian over exactly
 * width = ceil(bits(n^2) / 8) bytes (veil.crypto.paillier_wire). n^2 is public
 * and comes with every call as unsigned big-endian bytes. Nothing here needs a
 * key.
 *
 * The aggregate state keeps its GMP integers for the whole aggregate and
 * reuses them row after row, so summing allocates nothing per row. GMP uses
 * malloc; a reset callback on the memory context that owns the state clears
 * the integers, also when a query is cancelled or fails.
 */
#include "postgres.h"

#include <gmp.h>
#include <string.h>

#include "fmgr.h"
#include "utils/memutils.h"

PG_MODULE_MAGIC;

#define VEIL_VERSION_BYTE 0x01

typedef struct HomState
{
	int			width;			/* bytes of c and of n^2 */
	bool		has_value;		/* saw at least one non-NULL ciphertext */
	unsigned char *n2_bytes;	/* n^2, big-endian over width bytes */
	mpz_t		n2;
	mpz_t		acc;			/* running product mod n^2 */
	mpz_t		c;				/* scratch: the current ciphertext */
	mpz_t		product;		/* scratch: acc * c before reduction */
	MemoryContextCallback cleanup;
} HomState;

PG_FUNCTION_INFO_V1(veil_hom_sum_step);
PG_FUNCTION_INFO_V1(veil_hom_sum_combine);
PG_FUNCTION_INFO_V1(veil_hom_sum_serialize);
PG_FUNCTION_INFO_V1(veil_hom_sum_deserialize);
PG_FUNCTION_INFO_V1(veil_hom_sum_final);
PG_FUNCTION_INFO_V1(veil_hom_add);

static void
clear_state(void *arg)
{
	HomState   *state = (HomState *) arg;

	mpz_clears(state->n2, state->acc, state->c, state->product, NULL);
}

static int
width_of(bytea *n2)
{
	const unsigned char *bytes = (const unsigned char *) VARDATA_ANY(n2);
	int			len = VARSIZE_ANY_EXHDR(n2);

	while (len > 0 && *bytes == 0)	/* leading zero bytes do not count */
	{
		bytes++;
		len--;
	}
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("veil: n^2 is zero"),
				 errhint("Pass the Paillier public key's n^2 as unsigned big-endian bytes.")));
	return len;
}

/* n^2 right-aligned in width bytes (the caller's bytes may carry leading zeros). */
static void
copy_n2(unsigned char *out, bytea *n2, int width)
{
	int			len = VARSIZE_ANY_EXHDR(n2);

	memcpy(out, (const unsigned char *) VARDATA_ANY(n2) + (len - width), width);
}

/* A new state in the current memory context, for the n^2 given as bytes. */
static HomState *
new_state(const unsigned char *n2_bytes, int width)
{
	HomState   *state = palloc0(sizeof(HomState));

	state->width = width;
	state->n2_bytes = palloc(width);
	memcpy(state->n2_bytes, n2_bytes, width);
	mpz_inits(state->n2, state->acc, state->c, state->product, NULL);
	mpz_import(state->n2, width, 1, 1, 1, 0, n2_bytes);
	mpz_set_ui(state->acc, 1);
	state->cleanup.func = clear_state;
	state->cleanup.arg = state;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, &state->cleanup);
	return state;
}

/* Refuse anything that is not 0x01 || c with 0 < c < n^2, before any GMP work. */
static const unsigned char *
checked_body(bytea *ciphertext, const unsigned char *n2_bytes, int width)
{
	const unsigned char *bytes = (const unsigned char *) VARDATA_ANY(ciphertext);
	int			len = VARSIZE_ANY_EXHDR(ciphertext);
	bool		zero = true;

	if (len != width + 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("veil: a Paillier ciphertext for this n^2 is %d bytes, got %d", width + 1, len),
				 errhint("The value is truncated, from another key, or not a Paillier ciphertext.")));
	if (bytes[0] != VEIL_VERSION_BYTE)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("veil: unknown Paillier ciphertext version 0x%02x", bytes[0]),
				 errhint("This server extension reads version 0x01.")));
	for (int i = 1; i <= width && zero; i++)
		zero = bytes[i] == 0;
	if (zero || memcmp(bytes + 1, n2_bytes, width) >= 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("veil: Paillier ciphertext is not an integer in 1..n^2-1"),
				 errhint("The value is corrupt or belongs to a different key.")));
	return bytes + 1;
}

static void
multiply_into(HomState *state, const unsigned char *body)
{
	mpz_import(state->c, state->width, 1, 1, 1, 0, body);
	mpz_mul(state->product, state->acc, state->c);
	mpz_mod(state->acc, state->product, state->n2);
}

/* 0x01 || value, big-endian over width bytes. */
static bytea *
to_wire(mpz_t value, int width)
{
	bytea	   *out = palloc0(VARHDRSZ + width + 1);
	unsigned char *body = (unsigned char *) VARDATA(out) + 1;
	size_t		count = mpz_sgn(value) == 0 ? 0 : mpz_sizeinbase(value, 256);

	SET_VARSIZE(out, VARHDRSZ + width + 1);
	((unsigned char *) VARDATA(out))[0] = VEIL_VERSION_BYTE;
	if (count > 0)
		mpz_export(body + (width - count), NULL, 1, 1, 1, 0, value);
	return out;
}

Datum
veil_hom_sum_step(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext;
	HomState   *state = PG_ARGISNULL(0) ? NULL : (HomState *) PG_GETARG_POINTER(0);
	bytea	   *ciphertext;
	bytea	   *n2;

	if (!AggCheckCallContext(fcinfo, &aggcontext))
		elog(ERROR, "veil_hom_sum_step called in a non-aggregate context");
	if (PG_ARGISNULL(1))
	{
		/* SUM skips NULLs; before the first value the state stays SQL NULL. */
		if (state == NULL)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(state);
	}
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("veil: veil_hom_sum needs n^2, got NULL")));
	ciphertext = PG_GETARG_BYTEA_PP(1);
	n2 = PG_GETARG_BYTEA_PP(2);
	if (state == NULL)
	{
		int			width = width_of(n2);
		unsigned char *n2_bytes = palloc(width);
		MemoryContext old = MemoryContextSwitchTo(aggcontext);

		copy_n2(n2_bytes, n2, width);
		state = new_state(n2_bytes, width);
		MemoryContextSwitchTo(old);
	}
	multiply_into(state, checked_body(ciphertext, state->n2_bytes, state->width));
	state->has_value = true;
	PG_RETURN_POINTER(state);
}

Datum
veil_hom_sum_combine(PG_FUNCTION_ARGS)
{
	MemoryContext aggcontext;
	HomState   *left = PG_ARGISNULL(0) ? NULL : (HomState *) PG_GETARG_POINTER(0);
	HomState   *right = PG_ARGISNULL(1) ? NULL : (HomState *) PG_GETARG_POINTER(1);

	if (!AggCheckCallContext(fcinfo, &aggcontext))
		elog(ERROR, "veil_hom_sum_combine called in a non-aggregate context");
	if (right == NULL || !right->has_value)
	{
		if (left == NULL)
			PG_RETURN_NULL();
		PG_RETURN_POINTER(left);
	}
	if (left == NULL)
	{
		/* The right state may live in a short-lived context: copy it. */
		MemoryContext old = MemoryContextSwitchTo(aggcontext);

		left = new_state(right->n2_bytes, right->width);
		MemoryContextSwitchTo(old);
	}
	if (left->width != right->width || memcmp(left->n2_bytes, right->n2_bytes, left->width) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("veil: cannot combine Paillier sums under different n^2")));
	mpz_mul(left->product, left->acc, right->acc);
	mpz_mod(left->acc, left->product, left->n2);
	left->has_value = true;
	PG_RETURN_POINTER(left);
}

/* Serialized state: int32 width || n^2 (width) || has_value (1) || acc (width). */
Datum
veil_hom_sum_serialize(PG_FUNCTION_ARGS)
{
	HomState   *state = (HomState *) PG_GETARG_POINTER(0);
	int			width = state->width;
	bytea	   *out = palloc0(VARHDRSZ + 4 + 2 * width + 1);
	unsigned char *data = (unsigned char *) VARDATA(out);
	bytea	   *acc = to_wire(state->acc, width);

	SET_VARSIZE(out, VARHDRSZ + 4 + 2 * width + 1);
	memcpy(data, &width, 4);
	memcpy(data + 4, state->n2_bytes, width);
	data[4 + width] = state->has_value ? 1 : 0;
	memcpy(data + 5 + width, (unsigned char *) VARDATA(acc) + 1, width);
	pfree(acc);
	PG_RETURN_BYTEA_P(out);
}

Datum
veil_hom_sum_deserialize(PG_FUNCTION_ARGS)
{
	bytea	   *in = PG_GETARG_BYTEA_PP(0);
	const unsigned char *data = (const unsigned char *) VARDATA_ANY(in);
	int			width;
	HomState   *state;

	if (VARSIZE_ANY_EXHDR(in) < 4)
		elog(ERROR, "veil: truncated Paillier sum state");
	memcpy(&width, data, 4);
	if (width <= 0 || (int) VARSIZE_ANY_EXHDR(in) != 4 + 2 * width + 1)
		elog(ERROR, "veil: malformed Paillier sum state");
	state = new_state(data + 4, width);
	state->has_value = data[4 + width] != 0;
	mpz_import(state->acc, width, 1, 1, 1, 0, data + 5 + width);
	PG_RETURN_POINTER(state);
}

Datum
veil_hom_sum_final(PG_FUNCTION_ARGS)
{
	HomState   *state = (HomState *) PG_GETARG_POINTER(0);

	if (!state->has_value)
		PG_RETURN_NULL();
	PG_RETURN_BYTEA_P(to_wire(state->acc, state->width));
}

Datum
veil_hom_add(PG_FUNCTION_ARGS)
{
	bytea	   *a = PG_GETARG_BYTEA_PP(0);
	bytea	   *b = PG_GETARG_BYTEA_PP(1);
	bytea	   *n2 = PG_GETARG_BYTEA_PP(2);
	int			width = width_of(n2);
	unsigned char *n2_bytes = palloc(width);
	const unsigned char *body_a;
	const unsigned char *body_b;
	HomState   *state;
	bytea	   *out;

	copy_n2(n2_bytes, n2, width);
	body_a = checked_body(a, n2_bytes, width);
	body_b = checked_body(b, n2_bytes, width);
	state = new_state(n2_bytes, width);
	mpz_import(state->acc, width, 1, 1, 1, 0, body_a);
	multiply_into(state, body_b);
	out = to_wire(state->acc, width);
	PG_RETURN_BYTEA_P(out);
}
