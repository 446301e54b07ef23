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

int cnx_sharding_morton(const uint64_t pos[3], const uint64_t grid[3],
                        uint64_t *code)
{
    int bits[3];
    int total = 0, maxbits = 0, j = 0;
    uint64_t out = 0;

    for (int d = 0; d < 3; d++) {
        if (grid[d] < 1 || pos[d] >= grid[d])
            return cnx_error_set(CNX_ERANGE, 0,
                                 "sharding: grid position %" PRIu64
                                 " outside the grid's %" PRIu64
                                 " chunks on axis %d",
                                 pos[d], grid[d], d);
        bits[d] = 0;
        while (bits[d] < 64 && ((uint64_t)1 << bits[d]) < grid[d])
            bits[d]++;
        total += bits[d];
        if (bits[d] > maxbits)
            maxbits = bits[d];
    }
    if (total > 64)
        return cnx_error_set(CNX_ERANGE, 0,
                             "sharding: a grid of %" PRIu64 " x %" PRIu64
                             " x %" PRIu64 " chunks needs %d bits of chunk "
                             "id (64 at most)",
                             grid[0], grid[1], grid[2], total);
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
