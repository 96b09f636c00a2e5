/*
 * Onion layers on the server: peel (or add) an outer RND layer in place.
 *
 * An onion's outer layer is row-bound RND (rust/veil-kernels rowrnd.rs,
 * veil.crypto.rowrnd) under a per-column layer key: a value of the row with
 * id i is stored XOR keystream(i), where
 *
 *   keystream(i) = AES-256(k, block(i, 0)) || AES-256(k, block(i, 1)) || ...
 *   block(i, j)  = 0x02 || 0x00 x 3 || j (4 bytes BE) || i (8 bytes BE)
 *
 * and a BIGINT takes the first 8 keystream bytes read little-endian. To peel
 * the layer the client reveals k, and the server runs
 * UPDATE t SET c = veil_layer_xor_int(k, row_id, c). XOR is an involution:
 * the same call adds the layer again.
 *
 * The key is the same for every row of a statement, so its AES key schedule
 * is kept in fn_extra, with scratch buffers for up to CHUNK_BLOCKS keystream
 * blocks (a longer value takes its keystream chunk by chunk).
 */
#include "postgres.h"

#include <openssl/evp.h>
#include <string.h>

#include "fmgr.h"
#include "utils/memutils.h"

#define LAYER_KEY_LEN 32
#define BLOCK_LEN 16
#define KEYSTREAM_DOMAIN 0x02
#define CHUNK_BLOCKS 256

typedef struct LayerCache
{
	unsigned char key[LAYER_KEY_LEN];
	EVP_CIPHER_CTX *aes;		/* AES-256-ECB under the layer key */
	unsigned char blocks[CHUNK_BLOCKS * BLOCK_LEN]; /* scratch: block(i, j) */
	unsigned char stream[CHUNK_BLOCKS * BLOCK_LEN]; /* their encryptions */
	MemoryContextCallback cleanup;
} LayerCache;

PG_FUNCTION_INFO_V1(veil_layer_xor_int);
PG_FUNCTION_INFO_V1(veil_layer_xor_bytes);

static void
free_cache(void *arg)
{
	EVP_CIPHER_CTX_free(((LayerCache *) arg)->aes);
}

static LayerCache *
cache_for(FunctionCallInfo fcinfo, bytea *key_arg)
{
	LayerCache *cache = (LayerCache *) fcinfo->flinfo->fn_extra;
	const unsigned char *key = (const unsigned char *) VARDATA_ANY(key_arg);

	if (VARSIZE_ANY_EXHDR(key_arg) != LAYER_KEY_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("veil: a layer key is %d bytes, got %d", LAYER_KEY_LEN,
						(int) VARSIZE_ANY_EXHDR(key_arg))));
	if (cache != NULL && memcmp(cache->key, key, LAYER_KEY_LEN) == 0)
		return cache;
	if (cache == NULL)
	{
		cache = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(LayerCache));
		cache->aes = EVP_CIPHER_CTX_new();
		if (cache->aes == NULL)
			elog(ERROR, "veil: OpenSSL could not allocate a cipher context");
		cache->cleanup.func = free_cache;
		cache->cleanup.arg = cache;
		MemoryContextRegisterResetCallback(fcinfo->flinfo->fn_mcxt, &cache->cleanup);
		fcinfo->flinfo->fn_extra = cache;
	}
	if (EVP_EncryptInit_ex(cache->aes, EVP_aes_256_ecb(), NULL, key, NULL) != 1)
		elog(ERROR, "veil: OpenSSL could not set the AES key");
	EVP_CIPHER_CTX_set_padding(cache->aes, 0);
	memcpy(cache->key, key, LAYER_KEY_LEN);
	return cache;
}

/* Blocks first..first+count-1 (count <= CHUNK_BLOCKS) of id's keystream, into cache->stream. */
static void
keystream(LayerCache *cache, uint64 id, uint32 first, int count)
{
	int			out_len;

	for (int j = 0; j < count; j++)
	{
		unsigned char *block = cache->blocks + j * BLOCK_LEN;
		uint32		counter = first + (uint32) j;

		memset(block, 0, BLOCK_LEN);
		block[0] = KEYSTREAM_DOMAIN;
		for (int b = 0; b < 4; b++)
			block[4 + b] = (unsigned char) (counter >> (24 - 8 * b));
		for (int b = 0; b < 8; b++)
			block[8 + b] = (unsigned char) (id >> (56 - 8 * b));
	}
	if (EVP_EncryptUpdate(cache->aes, cache->stream, &out_len, cache->blocks,
						  count * BLOCK_LEN) != 1 || out_len != count * BLOCK_LEN)
		elog(ERROR, "veil: OpenSSL AES encryption failed");
}

/* veil_layer_xor_int(key bytea, id bigint, v bigint) -> bigint */
Datum
veil_layer_xor_int(PG_FUNCTION_ARGS)
{
	LayerCache *cache = cache_for(fcinfo, PG_GETARG_BYTEA_PP(0));
	uint64		id = (uint64) PG_GETARG_INT64(1);
	uint64		value = (uint64) PG_GETARG_INT64(2);
	uint64		word = 0;

	keystream(cache, id, 0, 1);
	for (int b = 7; b >= 0; b--)
		word = (word << 8) | cache->stream[b];
	PG_RETURN_INT64((int64) (value ^ word));
}

/* veil_layer_xor_bytes(key bytea, id bigint, v bytea) -> bytea */
Datum
veil_layer_xor_bytes(PG_FUNCTION_ARGS)
{
	LayerCache *cache = cache_for(fcinfo, PG_GETARG_BYTEA_PP(0));
	uint64		id = (uint64) PG_GETARG_INT64(1);
	bytea	   *value = PG_GETARG_BYTEA_PP(2);
	const unsigned char *in = (const unsigned char *) VARDATA_ANY(value);
	int			len = VARSIZE_ANY_EXHDR(value);
	bytea	   *result = (bytea *) palloc(VARHDRSZ + len);
	unsigned char *out = (unsigned char *) VARDATA(result);

	SET_VARSIZE(result, VARHDRSZ + len);
	for (int done = 0; done < len; done += CHUNK_BLOCKS * BLOCK_LEN)
	{
		int			chunk = Min(len - done, CHUNK_BLOCKS * BLOCK_LEN);

		keystream(cache, id, (uint32) (done / BLOCK_LEN), (chunk + BLOCK_LEN - 1) / BLOCK_LEN);
		for (int k = 0; k < chunk; k++)
			out[done + k] = in[done + k] ^ cache->stream[k];
	}
	PG_RETURN_BYTEA_P(result);
}
