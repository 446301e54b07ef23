/*
 * sharded.c - reading the Neuroglancer precomputed sharded format.
 *
 * A lookup is three ranged reads through the caller's callback: the 16-byte
 * shard index entry of the chunk's minishard, the minishard index it points
 * to, and the chunk's bytes. Every number read from a shard is untrusted:
 * offsets are added with overflow checks, lengths are bounded
 * (CNX_SHARD_MAX_*) before anything is allocated, and gzip output is capped,
 * so a truncated or forged shard is an error naming the shard and the
 * field, never a crash or a huge allocation. MurmurHash3_x86_128 is written
 * here from Austin Appleby's algorithm (checked against SMHasher's
 * verification value in the unit test). No state: thread-safe.
 */
#include "cnx/sharded.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "cnx/error.h"

static uint64_t load_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint32_t load_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

int cnx_sharding_check(const cnx_sharding *spec)
{
    if (spec->preshift_bits < 0 || spec->preshift_bits > 64)
        return cnx_error_set(CNX_EINVAL, 0,
                             "sharding: preshift_bits: %d not in 0..64",
                             spec->preshift_bits);
    if (spec->minishard_bits < 0 ||
        spec->minishard_bits > CNX_SHARD_MAX_MINISHARD_BITS)
        return cnx_error_set(
            CNX_EINVAL, 0, "sharding: minishard_bits: %d not in 0..%d",
            spec->minishard_bits, CNX_SHARD_MAX_MINISHARD_BITS);
    if (spec->shard_bits < 0 || spec->shard_bits > 64 - spec->minishard_bits)
        return cnx_error_set(CNX_EINVAL, 0,
                             "sharding: shard_bits: %d not in 0..%d "
                             "(minishard_bits + shard_bits <= 64)",
                             spec->shard_bits, 64 - spec->minishard_bits);
    if (spec->hash != CNX_SHARD_HASH_IDENTITY &&
        spec->hash != CNX_SHARD_HASH_MURMUR3)
        return cnx_error_set(CNX_EINVAL, 0, "sharding: hash: unknown (%d)",
                             (int)spec->hash);
    if (spec->minishard_index_encoding != CNX_SHARD_ENC_RAW &&
        spec->minishard_index_encoding != CNX_SHARD_ENC_GZIP)
        return cnx_error_set(CNX_EINVAL, 0,
                             "sharding: minishard_index_encoding: unknown");
    if (spec->data_encoding != CNX_SHARD_ENC_RAW &&
        spec->data_encoding != CNX_SHARD_ENC_GZIP)
        return cnx_error_set(CNX_EINVAL, 0, "sharding: data_encoding: unknown");
    return 0;
}

/* --- MurmurHash3_x86_128 ------------------------------------------------ */

static uint32_t rotl32(uint32_t x, int r)
{
    return (x << r) | (x >> (32 - r));
}

static uint32_t fmix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

void cnx_murmur3_x86_128(const void *key, size_t len, uint32_t seed,
                         uint32_t out[4])
{
    /* Four 32-bit lanes, each mixed with its own constant and the next
     * lane's constant, then cross-added; a tail of 1..15 bytes is mixed in
     * lane by lane; the final mix folds the length into every lane. */
    static const uint32_t c[5] = {0x239b961bu, 0xab0e9789u, 0x38b34ae5u,
                                  0xa1e38b93u, 0x239b961bu};
    static const int rk[4] = {15, 16, 17, 18}; /* k rotations per lane */
    static const int rh[4] = {19, 17, 15, 13}; /* h rotations per lane */
    static const uint32_t add[4] = {0x561ccd1bu, 0x0bcaa747u, 0x96cd1c35u,
                                    0x32ac3b17u};
    const uint8_t *data = key;
    size_t nblocks = len / 16;
    uint32_t h[4] = {seed, seed, seed, seed};
    uint32_t k[4];

    for (size_t b = 0; b < nblocks; b++) {
        for (int i = 0; i < 4; i++)
            k[i] = load_u32le(data + 16 * b + 4 * (size_t)i);
        for (int i = 0; i < 4; i++) {
            k[i] *= c[i];
            k[i] = rotl32(k[i], rk[i]);
            k[i] *= c[i + 1];
            h[i] ^= k[i];
            h[i] = rotl32(h[i], rh[i]);
            h[i] += h[(i + 1) % 4];
            h[i] = h[i] * 5 + add[i];
        }
    }

    {
        const uint8_t *tail = data + 16 * nblocks;
        size_t rest = len & 15;
        memset(k, 0, sizeof(k));
        for (size_t j = 0; j < rest; j++)
            k[j / 4] |= (uint32_t)tail[j] << (8 * (j % 4));
        for (int i = 0; i < 4; i++) {
            if (rest <= 4 * (size_t)i)
                break;
            k[i] *= c[i];
            k[i] = rotl32(k[i], rk[i]);
            k[i] *= c[i + 1];
            h[i] ^= k[i];
        }
    }

    for (int i = 0; i < 4; i++)
        h[i] ^= (uint32_t)len;
    h[0] += h[1] + h[2] + h[3];
    h[1] += h[0];
    h[2] += h[0];
    h[3] += h[0];
    for (int i = 0; i < 4; i++)
        h[i] = fmix32(h[i]);
    h[0] += h[1] + h[2] + h[3];
    h[1] += h[0];
    h[2] += h[0];
    h[3] += h[0];
    memcpy(out, h, sizeof(h));
}

/* --- chunk ids ---------------------------------------------------------- */

static int ceil_log2(uint64_t v)
{
    int bits = 0;
    while (bits < 64 && ((uint64_t)1 << bits) < v)
        bits++;
    return bits;
}

/* The bits of a compressed Morton code per axis of grid (each axis's
 * ceil(log2(chunks))), and their total, at most 64. */
static int grid_bits(const uint64_t grid[3], int bits[3], int *total)
{
    *total = 0;
    for (int d = 0; d < 3; d++) {
        bits[d] = ceil_log2(grid[d]);
        *total += bits[d];
    }
    if (*total > 64)
        return cnx_error_set(CNX_ERANGE, 0,
                             "sharding: a grid of %" PRIu64 " x %" PRIu64
                             " x %" PRIu64 " chunks needs %d bits of chunk "
                             "id (64 at most)",
                             grid[0], grid[1], grid[2], *total);
    return 0;
}

int cnx_sharding_morton(const uint64_t pos[3], const uint64_t grid[3],
                        uint64_t *code)
{
    int bits[3];
    int total = 0, maxbits = 0, j = 0, rc;
    uint64_t out = 0;

    for (int d = 0; d < 3; d++)
        if (grid[d] < 1 || pos[d] >= grid[d])
            return cnx_error_set(CNX_ERANGE, 0,
                                 "sharding: grid position %" PRIu64
                                 " outside the grid's %" PRIu64
                                 " chunks on axis %d",
                                 pos[d], grid[d], d);
    rc = grid_bits(grid, bits, &total);
    if (rc != 0)
        return rc;
    for (int d = 0; d < 3; d++)
        if (bits[d] > maxbits)
            maxbits = bits[d];
    for (int i = 0; i < maxbits; i++)
        for (int d = 0; d < 3; d++)
            if (i < bits[d])
                out |= ((pos[d] >> i) & 1) << j++;
    assert(j == total);
    *code = out;
    return 0;
}

uint64_t cnx_sharding_hash(const cnx_sharding *spec, uint64_t chunk_id)
{
    uint64_t v =
        spec->preshift_bits >= 64 ? 0 : chunk_id >> spec->preshift_bits;
    uint8_t le[8];
    uint32_t h[4];

    if (spec->hash == CNX_SHARD_HASH_IDENTITY)
        return v;
    assert(spec->hash == CNX_SHARD_HASH_MURMUR3);
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    cnx_murmur3_x86_128(le, sizeof(le), 0, h);
    return (uint64_t)h[0] | (uint64_t)h[1] << 32;
}

static uint64_t low_mask(int bits)
{
    return bits >= 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
}

void cnx_sharding_locate(const cnx_sharding *spec, uint64_t chunk_id,
                         uint64_t *shard, uint64_t *minishard)
{
    uint64_t hashed = cnx_sharding_hash(spec, chunk_id);
    assert(spec->minishard_bits < 64);
    *minishard = hashed & low_mask(spec->minishard_bits);
    *shard = (hashed >> spec->minishard_bits) & low_mask(spec->shard_bits);
}

void cnx_sharding_shard_name(const cnx_sharding *spec, uint64_t shard,
                             char name[CNX_SHARD_NAME_MAX])
{
    int digits = (spec->shard_bits + 3) / 4;
    snprintf(name, CNX_SHARD_NAME_MAX, "%0*" PRIx64 ".shard", digits, shard);
}

uint64_t cnx_sharding_index_size(const cnx_sharding *spec)
{
    assert(spec->minishard_bits <= CNX_SHARD_MAX_MINISHARD_BITS);
    return (uint64_t)16 << spec->minishard_bits;
}

/* --- indexes ------------------------------------------------------------ */

/* Decode the 16-byte shard index entry of minishard m into an absolute
 * range. */
static int decode_index_entry(const cnx_sharding *spec, const uint8_t e[16],
                              uint64_t m, cnx_shard_range *out)
{
    uint64_t base = cnx_sharding_index_size(spec);
    uint64_t start = load_u64le(e), end = load_u64le(e + 8);

    if (end < start)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "shard index entry %" PRIu64 ": end %" PRIu64
                             " before start %" PRIu64,
                             m, end, start);
    if (end > UINT64_MAX - base)
        return cnx_error_set(
            CNX_ECORRUPT, 0,
            "shard index entry %" PRIu64 ": end %" PRIu64 " overflows", m, end);
    out->start = base + start;
    out->end = base + end;
    return 0;
}

int cnx_shard_index_decode(const cnx_sharding *spec, const uint8_t *data,
                           size_t len, cnx_shard_range **out)
{
    uint64_t size = cnx_sharding_index_size(spec);
    uint64_t n = size / 16;
    cnx_shard_range *ranges;

    *out = NULL;
    if (size > CNX_SHARD_MAX_MINISHARD_INDEX)
        return cnx_error_set(
            CNX_ETOOBIG, 0,
            "shard index of %" PRIu64 " bytes is over the limit", size);
    if ((uint64_t)len != size)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "shard index: %zu bytes, expected "
                             "%" PRIu64 " (truncated shard?)",
                             len, size);
    ranges = calloc((size_t)n, sizeof(*ranges));
    if (ranges == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "sharded: out of memory");
    for (uint64_t m = 0; m < n; m++) {
        int rc = decode_index_entry(spec, data + 16 * m, m, &ranges[m]);
        if (rc != 0) {
            free(ranges);
            return rc;
        }
    }
    *out = ranges;
    return 0;
}

int cnx_sharded_gunzip(const uint8_t *data, size_t len, size_t max_out,
                       uint8_t **out, size_t *out_len)
{
    z_stream zs;
    uint8_t *buf = NULL;
    size_t cap = 0, used = 0;
    int zrc, rc = 0;

    assert(max_out < SIZE_MAX);
    *out = NULL;
    *out_len = 0;
    memset(&zs, 0, sizeof(zs));
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) /* gzip wrapper only */
        return cnx_error_set(CNX_ENOMEM, 0, "gzip: inflateInit2");
    zs.next_in = (Bytef *)(uintptr_t)data;
    for (;;) {
        size_t in_left = len - (size_t)(zs.next_in - (const Bytef *)data);
        if (used == cap) {
            size_t want = cap == 0 ? 4096 : cap * 2;
            uint8_t *grown;
            if (cap >= max_out + 1) {
                rc = cnx_error_set(CNX_ETOOBIG, 0,
                                   "gzip: inflates to more than "
                                   "%zu bytes",
                                   max_out);
                goto done;
            }
            if (want > max_out + 1)
                want = max_out + 1; /* one byte over tells us it is over */
            grown = realloc(buf, want);
            if (grown == NULL) {
                rc = cnx_error_set(CNX_ENOMEM, 0, "sharded: out of memory");
                goto done;
            }
            buf = grown;
            cap = want;
        }
        zs.avail_in = in_left > UINT32_MAX ? UINT32_MAX : (uInt)in_left;
        zs.next_out = buf + used;
        zs.avail_out =
            cap - used > UINT32_MAX ? UINT32_MAX : (uInt)(cap - used);
        {
            uInt before = zs.avail_out;
            zrc = inflate(&zs, Z_NO_FLUSH);
            used += before - zs.avail_out;
        }
        if (used > max_out) {
            rc = cnx_error_set(CNX_ETOOBIG, 0,
                               "gzip: inflates to more than %zu "
                               "bytes",
                               max_out);
            goto done;
        }
        if (zrc == Z_STREAM_END) {
            /* Another member may follow (gzip allows concatenation). */
            if ((size_t)(zs.next_in - (const Bytef *)data) == len)
                break;
            if (inflateReset(&zs) != Z_OK) {
                rc = cnx_error_set(CNX_ECORRUPT, 0, "gzip: cannot restart");
                goto done;
            }
            continue;
        }
        if (zrc == Z_BUF_ERROR && zs.avail_in == 0 && zs.avail_out > 0) {
            rc = cnx_error_set(CNX_ECORRUPT, 0, "gzip: truncated stream");
            goto done;
        }
        if (zrc != Z_OK && zrc != Z_BUF_ERROR) {
            rc = cnx_error_set(CNX_ECORRUPT, 0, "gzip: %s",
                               zs.msg != NULL ? zs.msg : "corrupt stream");
            goto done;
        }
    }
    *out = buf;
    *out_len = used;
    buf = NULL;
done:
    inflateEnd(&zs);
    free(buf);
    return rc;
}

int cnx_minishard_index_decode(const cnx_sharding *spec, const uint8_t *data,
                               size_t len, cnx_minishard_entry **out, size_t *n)
{
    uint8_t *plain = NULL;
    const uint8_t *p = data;
    cnx_minishard_entry *e = NULL;
    uint64_t base = cnx_sharding_index_size(spec);
    uint64_t id = 0, pos = base;
    size_t count;
    int rc = 0;

    *out = NULL;
    *n = 0;
    if (spec->minishard_index_encoding == CNX_SHARD_ENC_GZIP) {
        rc = cnx_sharded_gunzip(
            data, len, (size_t)CNX_SHARD_MAX_MINISHARD_INDEX, &plain, &len);
        if (rc != 0)
            return cnx_error_wrap("minishard index");
        p = plain;
    } else if ((uint64_t)len > CNX_SHARD_MAX_MINISHARD_INDEX) {
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "minishard index: %zu bytes is over "
                             "the limit",
                             len);
    }
    if (len % 24 != 0) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "minishard index: %zu bytes, not a "
                           "multiple of 24",
                           len);
        goto done;
    }
    count = len / 24;
    if (count == 0)
        goto done;
    e = calloc(count, sizeof(*e));
    if (e == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "sharded: out of memory");
        goto done;
    }
    /* Columns: ids (delta), offsets (delta from the prior chunk's end),
     * sizes; all absolute positions start at the end of the shard index. */
    for (size_t i = 0; i < count; i++) {
        uint64_t did = load_u64le(p + 8 * i);
        uint64_t doff = load_u64le(p + 8 * (count + i));
        uint64_t size = load_u64le(p + 8 * (2 * count + i));
        if (i > 0 && did > UINT64_MAX - id) {
            rc = cnx_error_set(CNX_ECORRUPT, 0,
                               "minishard index: chunk id of entry "
                               "%zu overflows",
                               i);
            goto done;
        }
        id += did;
        if (doff > UINT64_MAX - pos || size > UINT64_MAX - (pos + doff)) {
            rc = cnx_error_set(CNX_ECORRUPT, 0,
                               "minishard index: offset of entry "
                               "%zu (chunk %" PRIu64 ") overflows",
                               i, id);
            goto done;
        }
        pos += doff;
        e[i].chunk_id = id;
        e[i].offset = pos;
        e[i].size = size;
        pos += size;
    }
    *out = e;
    *n = count;
    e = NULL;
done:
    free(e);
    free(plain);
    return rc;
}

/* --- lookup ------------------------------------------------------------- */

/* One ranged read, its failure named: a range past the end of the file is
 * corrupt data (an index pointed there), a missing file is passed up. */
static int read_range(cnx_shard_read_fn read, void *ctx, const char *name,
                      const char *what, uint64_t start, uint64_t end,
                      uint8_t **out)
{
    int rc;
    assert(end >= start);
    *out = NULL;
    rc = read(ctx, name, start, end - start, out);
    if (rc == CNX_ERANGE)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "sharded: %s: %s [%" PRIu64 ", %" PRIu64
                             ") lies past the end of the shard",
                             name, what, start, end);
    if (rc == CNX_ENOTFOUND)
        return cnx_error_set(CNX_ENOTFOUND, 0, "sharded: %s: no such shard",
                             name);
    if (rc != 0)
        return cnx_error_wrap("sharded: %s: %s", name, what);
    if (*out == NULL && end > start)
        return cnx_error_set(CNX_EIO, 0, "sharded: %s: %s: read gave no data",
                             name, what);
    return 0;
}

int cnx_sharded_read_minishard(const cnx_sharding *spec, uint64_t shard,
                               uint64_t minishard, cnx_shard_read_fn read,
                               void *ctx, cnx_minishard_entry **out, size_t *n)
{
    char name[CNX_SHARD_NAME_MAX];
    uint8_t *buf = NULL;
    cnx_shard_range range;
    int rc;

    assert(cnx_sharding_check(spec) == 0);
    assert(minishard < ((uint64_t)1 << spec->minishard_bits));
    *out = NULL;
    *n = 0;
    cnx_sharding_shard_name(spec, shard, name);
    rc = read_range(read, ctx, name, "shard index entry", 16 * minishard,
                    16 * minishard + 16, &buf);
    if (rc == CNX_ECORRUPT)
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "sharded: %s: shard index truncated: no entry "
                           "for minishard %" PRIu64 " at byte %" PRIu64,
                           name, minishard, 16 * minishard);
    if (rc != 0)
        return rc;
    rc = decode_index_entry(spec, buf, minishard, &range);
    free(buf);
    buf = NULL;
    if (rc != 0)
        return cnx_error_wrap("sharded: %s", name);
    if (range.end == range.start)
        return 0; /* an empty minishard */
    if (range.end - range.start > CNX_SHARD_MAX_MINISHARD_INDEX)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "sharded: %s: minishard %" PRIu64
                             " index of %" PRIu64 " bytes is over the limit",
                             name, minishard, range.end - range.start);
    rc = read_range(read, ctx, name, "minishard index", range.start, range.end,
                    &buf);
    if (rc != 0)
        return rc;
    rc = cnx_minishard_index_decode(spec, buf,
                                    (size_t)(range.end - range.start), out, n);
    free(buf);
    if (rc != 0)
        return cnx_error_wrap("sharded: %s: minishard %" PRIu64, name,
                              minishard);
    return 0;
}

int cnx_sharded_read_entry(const cnx_sharding *spec, uint64_t shard,
                           const cnx_minishard_entry *entry,
                           cnx_shard_read_fn read, void *ctx, uint8_t **out,
                           size_t *len)
{
    char name[CNX_SHARD_NAME_MAX];
    uint8_t *buf = NULL;
    int rc;

    *out = NULL;
    *len = 0;
    cnx_sharding_shard_name(spec, shard, name);
    if (entry->size > CNX_SHARD_MAX_CHUNK)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "sharded: %s: chunk %" PRIu64 " of %" PRIu64
                             " bytes is over the limit",
                             name, entry->chunk_id, entry->size);
    rc = read_range(read, ctx, name, "chunk data", entry->offset,
                    entry->offset + entry->size, &buf);
    if (rc != 0)
        return rc;
    if (spec->data_encoding == CNX_SHARD_ENC_GZIP) {
        rc = cnx_sharded_gunzip(buf, (size_t)entry->size,
                                (size_t)CNX_SHARD_MAX_CHUNK, out, len);
        free(buf);
        if (rc != 0)
            return cnx_error_wrap("sharded: %s: chunk %" PRIu64, name,
                                  entry->chunk_id);
        return 0;
    }
    if (buf == NULL) { /* an empty chunk: give the caller a valid pointer */
        buf = malloc(1);
        if (buf == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "sharded: out of memory");
    }
    *out = buf;
    *len = (size_t)entry->size;
    return 0;
}

int cnx_sharded_read_chunk(const cnx_sharding *spec, uint64_t chunk_id,
                           cnx_shard_read_fn read, void *ctx, uint8_t **out,
                           size_t *len)
{
    char name[CNX_SHARD_NAME_MAX];
    uint64_t shard, minishard;
    cnx_minishard_entry *entries = NULL;
    const cnx_minishard_entry *hit = NULL;
    size_t n = 0;
    int rc;

    assert(cnx_sharding_check(spec) == 0);
    *out = NULL;
    *len = 0;
    cnx_sharding_locate(spec, chunk_id, &shard, &minishard);
    cnx_sharding_shard_name(spec, shard, name);
    rc = cnx_sharded_read_minishard(spec, shard, minishard, read, ctx, &entries,
                                    &n);
    if (rc != 0)
        return rc;
    if (n == 0) {
        free(entries);
        return cnx_error_set(CNX_ENOTFOUND, 0,
                             "sharded: chunk %" PRIu64 " not found (minishard "
                             "%" PRIu64 " of %s is empty)",
                             chunk_id, minishard, name);
    }
    for (size_t i = 0; i < n; i++)
        if (entries[i].chunk_id == chunk_id) {
            hit = &entries[i];
            break;
        }
    if (hit == NULL)
        rc = cnx_error_set(CNX_ENOTFOUND, 0,
                           "sharded: chunk %" PRIu64 " not found (not in "
                           "minishard %" PRIu64 " of %s)",
                           chunk_id, minishard, name);
    else
        rc = cnx_sharded_read_entry(spec, shard, hit, read, ctx, out, len);
    free(entries);
    return rc;
}

/* --- encoding one shard ------------------------------------------------- */

/* A growable output buffer. */
typedef struct out_buf {
    uint8_t *p;
    size_t len;
    size_t cap;
} out_buf;

static int out_reserve(out_buf *b, size_t more)
{
    size_t want;
    uint8_t *grown;
    if (more > SIZE_MAX - b->len)
        return cnx_error_set(CNX_ETOOBIG, 0, "shard encode: shard too big");
    if (b->len + more <= b->cap)
        return 0;
    want = b->cap < 4096 ? 4096 : b->cap;
    while (want < b->len + more)
        want = want > SIZE_MAX / 2 ? b->len + more : want * 2;
    grown = realloc(b->p, want);
    if (grown == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "shard encode: out of memory");
    b->p = grown;
    b->cap = want;
    return 0;
}

static void store_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Append data to b as stored under enc: as is, or one gzip member with a
 * fixed header (mtime 0, no name, OS 255) at a fixed level. */
static int out_append(out_buf *b, cnx_shard_encoding enc, const uint8_t *data,
                      size_t len)
{
    z_stream zs;
    gz_header head;
    uLong bound;
    int rc, zrc;

    if (enc == CNX_SHARD_ENC_RAW) {
        rc = out_reserve(b, len);
        if (rc != 0)
            return rc;
        if (len > 0)
            memcpy(b->p + b->len, data, len);
        b->len += len;
        return 0;
    }
    assert(enc == CNX_SHARD_ENC_GZIP);
    memset(&zs, 0, sizeof(zs));
    memset(&head, 0, sizeof(head));
    head.os = 255; /* "unknown": the same bytes on every platform */
    if (deflateInit2(&zs, CNX_SHARD_GZIP_LEVEL, Z_DEFLATED, 16 + MAX_WBITS, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return cnx_error_set(CNX_ENOMEM, 0, "gzip: deflateInit2");
    if (deflateSetHeader(&zs, &head) != Z_OK) {
        deflateEnd(&zs);
        return cnx_error_set(CNX_ENOMEM, 0, "gzip: deflateSetHeader");
    }
    /* Chunks are at most CNX_SHARD_MAX_CHUNK (1 GiB): one call suffices. */
    assert(len <= UINT32_MAX);
    bound = deflateBound(&zs, (uLong)len);
    rc = out_reserve(b, (size_t)bound);
    if (rc != 0) {
        deflateEnd(&zs);
        return rc;
    }
    zs.next_in = (Bytef *)(uintptr_t)data;
    zs.avail_in = (uInt)len;
    zs.next_out = b->p + b->len;
    zs.avail_out = (uInt)bound;
    zrc = deflate(&zs, Z_FINISH);
    if (zrc != Z_STREAM_END) {
        deflateEnd(&zs);
        return cnx_error_set(CNX_EIO, 0, "gzip: deflate failed (%d)", zrc);
    }
    b->len += (size_t)zs.total_out;
    deflateEnd(&zs);
    return 0;
}

/* A chunk's place in its shard: sorted by minishard, then id. */
typedef struct placed {
    uint64_t minishard;
    uint64_t chunk_id;
    size_t index; /* into the caller's array */
} placed;

static int placed_cmp(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    if (x->minishard != y->minishard)
        return x->minishard < y->minishard ? -1 : 1;
    if (x->chunk_id != y->chunk_id)
        return x->chunk_id < y->chunk_id ? -1 : 1;
    return 0;
}

int cnx_shard_encode(const cnx_sharding *spec, uint64_t shard,
                     const cnx_shard_chunk *chunks, size_t n, uint8_t **out,
                     size_t *len)
{
    uint64_t index_size = cnx_sharding_index_size(spec);
    placed *order = NULL;
    uint8_t *mindex = NULL;
    out_buf b = {NULL, 0, 0};
    int rc = 0;

    assert(cnx_sharding_check(spec) == 0);
    *out = NULL;
    *len = 0;
    if (index_size > CNX_SHARD_MAX_MINISHARD_INDEX)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "shard encode: a shard index of %" PRIu64
                             " bytes is over the limit (minishard_bits %d)",
                             index_size, spec->minishard_bits);
    if (n > 0) {
        order = malloc(n * sizeof(*order));
        if (order == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "shard encode: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t s, m;
        cnx_sharding_locate(spec, chunks[i].chunk_id, &s, &m);
        if (s != shard) {
            rc = cnx_error_set(CNX_EINVAL, 0,
                               "shard encode: chunk %" PRIu64
                               " belongs to shard %" PRIu64 ", not %" PRIu64,
                               chunks[i].chunk_id, s, shard);
            goto done;
        }
        if ((uint64_t)chunks[i].len > CNX_SHARD_MAX_CHUNK ||
            (uint64_t)chunks[i].prefix_len > CNX_SHARD_MAX_CHUNK) {
            rc = cnx_error_set(CNX_ETOOBIG, 0,
                               "shard encode: chunk %" PRIu64
                               " of %zu bytes is over the limit",
                               chunks[i].chunk_id, chunks[i].len);
            goto done;
        }
        order[i] = (placed){m, chunks[i].chunk_id, i};
    }
    if (n > 1)
        qsort(order, n, sizeof(*order), placed_cmp);
    for (size_t i = 1; i < n; i++)
        if (order[i].chunk_id == order[i - 1].chunk_id) {
            rc = cnx_error_set(CNX_EINVAL, 0,
                               "shard encode: chunk %" PRIu64 " given twice",
                               order[i].chunk_id);
            goto done;
        }
    rc = out_reserve(&b, (size_t)index_size);
    if (rc != 0)
        goto done;
    memset(b.p, 0, (size_t)index_size); /* empty minishards: [0, 0) */
    b.len = (size_t)index_size;
    for (size_t first = 0; first < n;) {
        uint64_t m = order[first].minishard;
        size_t last = first, k;
        uint64_t prev_end = 0, start;
        while (last < n && order[last].minishard == m)
            last++;
        k = last - first;
        if ((uint64_t)k > CNX_SHARD_MAX_MINISHARD_INDEX / 24) {
            rc = cnx_error_set(CNX_ETOOBIG, 0,
                               "shard encode: minishard %" PRIu64
                               " of %zu chunks is over the limit",
                               m, k);
            goto done;
        }
        mindex = malloc(24 * k);
        if (mindex == NULL) {
            rc = cnx_error_set(CNX_ENOMEM, 0, "shard encode: out of memory");
            goto done;
        }
        /* Columns: id deltas, offsets from the previous chunk's end (the
         * first from the end of the shard index), sizes as stored. */
        for (size_t j = 0; j < k; j++) {
            const cnx_shard_chunk *c = &chunks[order[first + j].index];
            uint64_t at;
            rc = out_append(&b, CNX_SHARD_ENC_RAW, c->prefix, c->prefix_len);
            if (rc != 0)
                goto done;
            at = (uint64_t)b.len - index_size;
            rc = out_append(&b, spec->data_encoding, c->data, c->len);
            if (rc != 0)
                goto done;
            store_u64le(mindex + 8 * j,
                        j == 0 ? c->chunk_id
                               : c->chunk_id - order[first + j - 1].chunk_id);
            store_u64le(mindex + 8 * (k + j), at - prev_end);
            store_u64le(mindex + 8 * (2 * k + j),
                        (uint64_t)b.len - index_size - at);
            prev_end = (uint64_t)b.len - index_size;
        }
        start = (uint64_t)b.len - index_size;
        rc = out_append(&b, spec->minishard_index_encoding, mindex, 24 * k);
        if (rc != 0)
            goto done;
        free(mindex);
        mindex = NULL;
        store_u64le(b.p + 16 * m, start);
        store_u64le(b.p + 16 * m + 8, (uint64_t)b.len - index_size);
        first = last;
    }
    *out = b.p;
    *len = b.len;
    b.p = NULL;
done:
    free(b.p);
    free(mindex);
    free(order);
    return rc;
}

/* --- choosing a spec ---------------------------------------------------- */

static int floor_log2(uint64_t v)
{
    int bits = 0;
    assert(v > 0);
    while (v >>= 1)
        bits++;
    return bits;
}

int cnx_sharding_choose(const uint64_t grid[3], uint64_t chunk_bytes,
                        const cnx_sharding_target *target, cnx_sharding *out)
{
    uint64_t shard_bytes = CNX_SHARD_TARGET_BYTES;
    uint64_t mini = CNX_SHARD_TARGET_MINISHARD;
    int bits[3], total = 0, c, p, rc;

    if (target != NULL && target->shard_bytes > 0)
        shard_bytes = target->shard_bytes;
    if (target != NULL && target->minishard_chunks > 0)
        mini = target->minishard_chunks;
    if (chunk_bytes == 0)
        return cnx_error_set(CNX_EINVAL, 0, "sharding: chunk size 0 bytes");
    for (int d = 0; d < 3; d++)
        if (grid[d] == 0)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "sharding: grid axis %d has no chunks", d);
    rc = grid_bits(grid, bits, &total);
    if (rc != 0)
        return rc;
    c = floor_log2(shard_bytes / chunk_bytes > 0 ? shard_bytes / chunk_bytes
                                                 : 1);
    if (c > total)
        c = total;
    p = floor_log2(mini);
    if (p > c)
        p = c;
    /* The shard index must stay readable (16 << minishard_bits). */
    if (c - p > 22)
        p = c - 22;
    out->preshift_bits = p;
    out->minishard_bits = c - p;
    out->shard_bits = total - c;
    out->hash = CNX_SHARD_HASH_IDENTITY;
    out->minishard_index_encoding = CNX_SHARD_ENC_GZIP;
    out->data_encoding = CNX_SHARD_ENC_RAW;
    return 0;
}

int cnx_sharding_choose_ids(uint64_t n, uint64_t total_bytes,
                            const cnx_sharding_target *target,
                            cnx_sharding *out)
{
    uint64_t shard_bytes = CNX_SHARD_TARGET_BYTES;
    uint64_t mini = CNX_SHARD_TARGET_MINISHARD;
    uint64_t per_shard;
    int sb, mb;

    if (target != NULL && target->shard_bytes > 0)
        shard_bytes = target->shard_bytes;
    if (target != NULL && target->minishard_chunks > 0)
        mini = target->minishard_chunks;
    sb =
        ceil_log2(total_bytes / shard_bytes + (total_bytes % shard_bytes != 0));
    if (sb > ceil_log2(n))
        sb = ceil_log2(n);
    per_shard =
        sb >= 64 ? 1 : (n >> sb) + ((n & (((uint64_t)1 << sb) - 1)) != 0);
    mb = ceil_log2(per_shard / mini + (per_shard % mini != 0));
    if (mb > 22)
        mb = 22;
    if (sb + mb > 64)
        sb = 64 - mb;
    out->preshift_bits = 0;
    out->minishard_bits = mb;
    out->shard_bits = sb;
    out->hash = CNX_SHARD_HASH_MURMUR3;
    out->minishard_index_encoding = CNX_SHARD_ENC_GZIP;
    out->data_encoding = CNX_SHARD_ENC_RAW;
    return 0;
}

void cnx_sharding_block(const cnx_sharding *spec, const uint64_t grid[3],
                        uint64_t block[3])
{
    int bits[3], total, left = spec->preshift_bits + spec->minishard_bits;
    (void)grid_bits(grid, bits, &total); /* the spec was chosen for grid */
    for (int d = 0; d < 3; d++)
        block[d] = 1;
    for (int i = 0; i < 64 && left > 0; i++)
        for (int d = 0; d < 3 && left > 0; d++)
            if (i < bits[d]) {
                block[d] <<= 1;
                left--;
            }
}
