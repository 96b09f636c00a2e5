/*
 * SWP (Song-Wagner-Perrig) search match on the server.
 *
 * A stored value is 0x01 || C_1 || ... || C_n, each C_i 16 bytes; a token is
 * 0x01 || X (16) || k (16) (veil.crypto.search, rust/veil-kernels search.rs).
 * A word C holds the token's word when, with T = C XOR X,
 * T[8..16] == first 8 bytes of AES-128_k(T[0..8] || 0^8).
 *
 * The token is the same for every row of a query, so its AES key schedule is
 * kept in fn_extra; a row's check blocks are encrypted in one ECB call.
 */
#include "postgres.h"

#include <openssl/evp.h>
#include <string.h>

#include "fmgr.h"
#include "utils/memutils.h"

#define VEIL_VERSION_BYTE 0x01
#define WORD_LEN 16
#define TOKEN_LEN (1 + 16 + 16)

typedef struct TokenCache
{
	unsigned char token[TOKEN_LEN];
	EVP_CIPHER_CTX *aes;		/* AES-128-ECB under the token's k */
	unsigned char *blocks;		/* scratch: the row's S || 0^8 blocks */
	unsigned char *encrypted;	/* scratch: their encryptions */
	int			capacity;		/* words the scratch buffers hold */
	MemoryContextCallback cleanup;
} TokenCache;

PG_FUNCTION_INFO_V1(veil_search_match);

static void
free_cache(void *arg)
{
	EVP_CIPHER_CTX_free(((TokenCache *) arg)->aes);
}

static TokenCache *
cache_for(FunctionCallInfo fcinfo, const unsigned char *token)
{
	TokenCache *cache = (TokenCache *) fcinfo->flinfo->fn_extra;

	if (cache != NULL && memcmp(cache->token, token, TOKEN_LEN) == 0)
		return cache;
	if (cache == NULL)
	{
		cache = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(TokenCache));
		cache->aes = EVP_CIPHER_CTX_new();
		if (cache->aes == NULL)
			elog(ERROR, "veil: OpenSSL could not allocate a cipher context");
		cache->cleanup.func = free_cache;
		cache->cleanup.arg = cache;
		MemoryContextRegisterResetCallback(fcinfo->flinfo->fn_mcxt, &cache->cleanup);
		fcinfo->flinfo->fn_extra = cache;
	}
	if (EVP_EncryptInit_ex(cache->aes, EVP_aes_128_ecb(), NULL, token + 17, NULL) != 1)
		elog(ERROR, "veil: OpenSSL could not set the AES key");
	EVP_CIPHER_CTX_set_padding(cache->aes, 0);
	memcpy(cache->token, token, TOKEN_LEN);
	return cache;
}

static void
reserve(FunctionCallInfo fcinfo, TokenCache *cache, int words)
{
	if (words <= cache->capacity)
		return;
	if (cache->blocks != NULL)
	{
		pfree(cache->blocks);
		pfree(cache->encrypted);
	}
	cache->capacity = Max(words, 2 * cache->capacity);
	cache->blocks = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, cache->capacity * WORD_LEN);
	cache->encrypted = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, cache->capacity * WORD_LEN);
}

Datum
veil_search_match(PG_FUNCTION_ARGS)
{
	bytea	   *stored = PG_GETARG_BYTEA_PP(0);
	bytea	   *token_arg = PG_GETARG_BYTEA_PP(1);
	const unsigned char *row = (const unsigned char *) VARDATA_ANY(stored);
	const unsigned char *token = (const unsigned char *) VARDATA_ANY(token_arg);
	const unsigned char *x = token + 1;
	int			len = VARSIZE_ANY_EXHDR(stored);
	int			words;
	int			out_len;
	TokenCache *cache;

	if (VARSIZE_ANY_EXHDR(token_arg) != TOKEN_LEN || token[0] != VEIL_VERSION_BYTE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("veil: a SEARCH token is %d bytes starting with 0x01", TOKEN_LEN)));
	if (len < 1 || row[0] != VEIL_VERSION_BYTE || (len - 1) % WORD_LEN != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("veil: malformed SEARCH ciphertext (%d bytes)", len),
				 errhint("A SEARCH value is 0x01 followed by 16-byte word ciphertexts.")));
	words = (len - 1) / WORD_LEN;
	if (words == 0)
		PG_RETURN_BOOL(false);
	cache = cache_for(fcinfo, token);
	reserve(fcinfo, cache, words);
	/* blocks[i] = T_i[0..8] || 0^8 with T_i = C_i XOR X; the zero half stays zero. */
	for (int i = 0; i < words; i++)
		for (int j = 0; j < 8; j++)
			cache->blocks[i * WORD_LEN + j] = row[1 + i * WORD_LEN + j] ^ x[j];
	if (EVP_EncryptUpdate(cache->aes, cache->encrypted, &out_len, cache->blocks,
						  words * WORD_LEN) != 1 || out_len != words * WORD_LEN)
		elog(ERROR, "veil: OpenSSL AES encryption failed");
	for (int i = 0; i < words; i++)
	{
		bool		match = true;

		for (int j = 0; j < 8 && match; j++)
			match = cache->encrypted[i * WORD_LEN + j] == (row[1 + i * WORD_LEN + 8 + j] ^ x[8 + j]);
		if (match)
			PG_RETURN_BOOL(true);
	}
	PG_RETURN_BOOL(false);
}
