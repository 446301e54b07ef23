/*
 * fuzz_sharded.c - a shard file of the precomputed sharded format
 * (cnx_sharded_read_chunk: the shard index, a minishard index, a chunk),
 * read from any store that holds a sharded layer. Byte 0 chooses the spec:
 * bits 0-1 minishard_bits (0..3), bit 2 gzip minishard indexes, bit 3 gzip
 * data, bit 4 murmurhash3_x86_128 (else identity), bits 5-6 preshift_bits
 * (0..3); bytes 1-8 the chunk id (little-endian); the rest is the shard
 * (shard_bits 0: one shard). A chunk that is found lies inside the bounds
 * the reader promises; every failure is a cnx error code.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/sharded.h"
#include "fuzz_common.h"

typedef struct {
    const uint8_t *data;
    size_t len;
} shard_file;

static int mem_read(void *ctx, const char *name, uint64_t offset,
                    uint64_t length, uint8_t **out)
{
    const shard_file *f = ctx;
    (void)name;
    if (offset > f->len || length > f->len - offset)
        return cnx_error_set(CNX_ERANGE, 0, "past the end");
    *out = malloc(length ? (size_t)length : 1);
    if (*out == NULL)
        abort();
    if (length)
        memcpy(*out, f->data + offset, (size_t)length);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cnx_sharding spec;
    shard_file f;
    uint64_t id = 0;
    uint8_t *out = NULL;
    size_t len = 0;
    int rc;
    if (size < 9)
        return 0;
    memset(&spec, 0, sizeof(spec));
    spec.minishard_bits = data[0] & 3;
    spec.minishard_index_encoding =
        (data[0] & 4) ? CNX_SHARD_ENC_GZIP : CNX_SHARD_ENC_RAW;
    spec.data_encoding = (data[0] & 8) ? CNX_SHARD_ENC_GZIP : CNX_SHARD_ENC_RAW;
    spec.hash = (data[0] & 16) ? CNX_SHARD_HASH_MURMUR3 : CNX_SHARD_HASH_IDENTITY;
    spec.preshift_bits = (data[0] >> 5) & 3;
    spec.shard_bits = 0;
    for (int i = 0; i < 8; i++)
        id |= (uint64_t)data[1 + i] << (8 * i);
    if (cnx_sharding_check(&spec) != 0)
        abort(); /* every spec this harness makes is valid */
    f.data = data + 9;
    f.len = size - 9;
    rc = cnx_sharded_read_chunk(&spec, id, mem_read, &f, &out, &len);
    if (rc == 0 && spec.data_encoding == CNX_SHARD_ENC_RAW && len > f.len)
        abort(); /* a raw chunk is a range of the file */
    if (rc != 0 && rc != CNX_ENOTFOUND && rc != CNX_ECORRUPT &&
        rc != CNX_ERANGE && rc != CNX_ETOOBIG && rc != CNX_ENOMEM)
        abort();
    free(out);
    return 0;
}
